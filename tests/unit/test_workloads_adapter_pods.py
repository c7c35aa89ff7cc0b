"""The adapter planner's eyes and hands (workloads/adapter_pods.py): how a pod object reads as
the planner's PodAdapters, and how a plan's moves are applied (a stand-in API and a scripted
vLLM).  tests/sandbox/test_adapter_pods.py drives real pods with both."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import httpx

from inference_rollout.api import (
    ANN_ADAPTER_SET_MOVED_AT,
    ANN_ADAPTER_SET_VERIFIED_START,
    LABEL_ADAPTER_SET,
)
from inference_rollout.api.spec import PodTemplate
from inference_rollout.core.adapter_plan import Admit, Evict, LoadAdapter, PodMove, UnloadAdapter
from inference_rollout.kube import KubeError
from inference_rollout.paths import ApiPath
from inference_rollout.workloads.adapter_pods import AdapterPods, ObservedPod, pod_adapters
from inference_rollout.workloads.lora import PodServer, VLLMAdapters
from inference_rollout.workloads.revisions import deployment_body, revision_labels, service_body

NOW = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def pod(name: str = "p-0", label: str | None = "0123456789", ready: bool = True,
        annotations: dict[str, str] | None = None, starts: tuple[str, ...] = (
            "2026-12-07T09:00:00Z",), deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "7",
                            "labels": {LABEL_ADAPTER_SET: label} if label else {},
                            "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T09:59:00Z"
    return {"metadata": meta, "status": {
        "phase": "Running", "podIP": "10.244.0.5",
        "conditions": [{"type": "ContainersReady", "status": "True" if ready else "False"}],
        "containerStatuses": [{"name": f"c{i}", "state": {"running": {"startedAt": s}}}
                              for i, s in enumerate(starts)]}}


def test_a_set_label_is_admitted_and_moving_or_pending_is_not() -> None:
    assert pod_adapters(pod(), {}).admitted
    for word in ("moving", "pending", None):
        p = pod_adapters(pod(label=word), {})
        assert (p.admitted, p.label) == (False, None)


def test_the_latest_container_start_counts_and_annotations_that_do_not_parse_are_unknown() -> None:
    p = pod_adapters(pod(starts=("2026-12-07T09:00:00Z", "2026-12-07T09:30:00Z"), annotations={
        ANN_ADAPTER_SET_MOVED_AT: "yesterday",
        ANN_ADAPTER_SET_VERIFIED_START: "2026-12-07T09:00:00.000Z"}), {})
    assert p.container_started_at == datetime(2026, 12, 7, 9, 30, tzinfo=UTC)
    assert p.moved_at is None
    assert p.stale  # a sidecar restarted after the start the set was verified on


def test_a_pod_not_ready_or_being_deleted_is_not_serving() -> None:
    assert pod_adapters(pod(), None).serving
    assert not pod_adapters(pod(ready=False), None).serving
    assert not pod_adapters(pod(deleting=True), None).serving


class StandInPods:
    """The pods API as the applier uses it: merge patches recorded; one pod's refused."""

    def __init__(self, refuse: str = "") -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.refuse = refuse

    async def merge_patch(self, path: ApiPath, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/" + self.refuse):
            raise KubeError(409, "PATCH", path, '{"message": "the object has been modified"}')
        self.patches.append((path.rsplit("/", 1)[1], body))
        return {}


def vllm(calls: list[tuple[str, str]], fail_for: str = "") -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        calls.append((request.url.host, f"{request.url.path} {body.get('lora_name')}"))
        if request.url.host == fail_for:
            return httpx.Response(400, text="cannot load")
        return httpx.Response(200, text="Success")
    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


def observed(name: str, ip: str) -> ObservedPod:
    return ObservedPod(pod_adapters(pod(name=name, label="moving"), {}), PodServer(ip, 8000), "7")


def test_moves_apply_in_order_and_a_pods_failure_stops_only_that_pods_moves() -> None:
    started = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
    moves: list[PodMove] = [
        Evict("a"), LoadAdapter("b", "support", "s3://v2"), UnloadAdapter("b", "old"),
        Admit("b", "abcdef0123", started), LoadAdapter("c", "support", "s3://v2"),
        Admit("c", "abcdef0123", started)]
    pods = {"a": observed("a", "10.0.0.1"), "b": observed("b", "10.0.0.2"),
            "c": observed("c", "10.0.0.3")}
    calls: list[tuple[str, str]] = []
    kube = StandInPods()

    async def run() -> list[Any]:
        async with vllm(calls, fail_for="10.0.0.2") as client:
            return await AdapterPods(kube, VLLMAdapters(client), "team").apply(  # type: ignore[arg-type]
                moves, pods, NOW)
    failures = asyncio.run(run())
    assert [f.move for f in failures] == [LoadAdapter("b", "support", "s3://v2")]
    assert "refused" in failures[0].reason
    # b: nothing after its failed load (no unload, never admitted); a and c go on
    assert calls == [("10.0.0.2", "/v1/load_lora_adapter support"),
                     ("10.0.0.3", "/v1/load_lora_adapter support")]
    assert [(name, body["metadata"]["labels"][LABEL_ADAPTER_SET]) for name, body in
            kube.patches] == [("a", "moving"), ("c", "abcdef0123")]
    evict, admit = kube.patches[0][1]["metadata"], kube.patches[1][1]["metadata"]
    assert evict["annotations"] == {ANN_ADAPTER_SET_MOVED_AT: "2026-12-07T10:00:00.000Z"}
    assert "resourceVersion" not in evict  # taking a pod out is never wrong
    assert admit["resourceVersion"] == "7"  # admitting one that changed since it was read is
    assert admit["annotations"][ANN_ADAPTER_SET_VERIFIED_START] == "2026-12-07T09:00:00.000Z"


def test_an_admit_refused_on_a_changed_pod_is_a_failure_not_an_exception() -> None:
    kube = StandInPods(refuse="a")

    async def run() -> list[Any]:
        async with vllm([]) as client:
            return await AdapterPods(kube, VLLMAdapters(client), "team").apply(  # type: ignore[arg-type]
                [Admit("a", "abcdef0123")], {"a": observed("a", "10.0.0.1")}, NOW)
    (failure,) = asyncio.run(run())
    assert failure.move == Admit("a", "abcdef0123") and "modified" in failure.reason
    assert kube.patches == []


def test_with_adapters_new_pods_start_pending_and_a_sets_service_selects_that_set() -> None:
    template = PodTemplate.model_validate({"metadata": {"labels": {"team": "a"}}, "spec": {
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.12.0",
                        "ports": [{"name": "http", "containerPort": 8000}]}]}})
    plain = deployment_body("ns", "chat", "uid", "0123456789", template, 3)
    assert LABEL_ADAPTER_SET not in plain["spec"]["template"]["metadata"]["labels"]
    lora = deployment_body("ns", "chat", "uid", "0123456789", template, 3, adapters=True)
    labels = lora["spec"]["template"]["metadata"]["labels"]
    assert labels[LABEL_ADAPTER_SET] == "pending" and labels["team"] == "a"
    # not in the selector: the operator relabels pods the ReplicaSet keeps owning
    assert LABEL_ADAPTER_SET not in lora["spec"]["selector"]["matchLabels"]
    assert LABEL_ADAPTER_SET not in service_body("ns", "chat", "uid", "0123456789",
                                                 8000)["spec"]["selector"]
    svc = service_body("ns", "chat", "uid", "0123456789", 8000, adapter_set="abcdef0123")
    assert svc["spec"]["selector"] == {**revision_labels("chat", "0123456789"),
                                       LABEL_ADAPTER_SET: "abcdef0123"}
