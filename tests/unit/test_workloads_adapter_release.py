"""The reconciler's hands for a rollout with adapters (workloads/adapter_release.py): which
objects an action keyed by serving version writes, which pods the analysis and the status name.

A recording stand-in for :class:`~inference_rollout.workloads.revisions.Revisions` keeps these
pure; the same calls on the real API server are what tests/e2e/test_adapter_release.py and the
RBAC proof (tests/sandbox/test_delivery_rbac.py, release C) run."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from inference_rollout.api.spec import PodTemplate
from inference_rollout.core.adapter_plan import PodAdapters, serving_version, set_id
from inference_rollout.core.serving_versions import ServingVersionFacts
from inference_rollout.core.serving_versions import observe as observe_versions
from inference_rollout.core.types import RevisionState
from inference_rollout.workloads.adapter_pods import ObservedPod
from inference_rollout.workloads.adapter_release import (
    VersionRevisions,
    released_adapter,
    status_pods,
    unread,
    version_pods,
)
from inference_rollout.workloads.adapter_world import AdapterWorld

T1, T2 = "t1t1t1t1t1", "t2t2t2t2t2"
A1, A2 = {"support": "/a/v1"}, {"support": "/a/v2"}
S1, S2 = set_id(A1), set_id(A2)
V1, V2, V3 = serving_version(T1, A1), serving_version(T1, A2), serving_version(T2, A2)
TEMPLATE = PodTemplate.model_validate({"spec": {"containers": [
    {"name": "vllm", "image": "vllm/vllm-openai:v1", "ports": [{"containerPort": 8000}]}]}})


class Recorded:
    """The calls ``Revisions`` would make, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def ensure_version(self, version: str, facts: ServingVersionFacts, port: int) -> None:
        self.calls.append(("service", version, facts.pods, port))

    async def ensure(self, revision: str, replicas: int, template: Any, template_revision: str,
                     *, adapters: bool = False) -> None:
        self.calls.append(("deployment", revision, replicas, template_revision, adapters))

    async def delete(self, revision: str, kinds: tuple[str, ...] | None = None) -> None:
        self.calls.append(("delete", revision, kinds))

    async def orphan(self, revision: str, kinds: tuple[str, ...] | None = None) -> None:
        self.calls.append(("orphan", revision, kinds))


def pod(name: str, label: str | None, loaded: dict[str, str] | None,
        serving: bool = True) -> ObservedPod:
    return ObservedPod(PodAdapters(name, serving, loaded, label, label is not None), None, "1")


def world(versions: dict[str, ServingVersionFacts], spec_version: str,
          deployments: dict[str, RevisionState], stable: str | None, canary: str | None,
          pods: dict[str, dict[str, ObservedPod]] | None = None) -> AdapterWorld:
    seen = observe_versions(deployments, versions, {}, stable, canary)
    return AdapterWorld(seen, versions, pods or {}, spec_version, deployments)


def facts(template: str, adapters: dict[str, str], pods: int = 0,
          service: bool = True) -> ServingVersionFacts:
    return ServingVersionFacts(template, set_id(adapters), pods, service, adapters)


DEPLOYMENTS = {T1: RevisionState(4, 4, 4, port=8000)}


def run(acting: VersionRevisions, *calls: tuple[str, Any]) -> list[tuple[Any, ...]]:
    async def go() -> None:
        for method, args in calls:
            await getattr(acting, method)(*args)
    asyncio.run(go())
    recorded = acting.revisions
    assert isinstance(recorded, Recorded)
    return recorded.calls


def acting(w: AdapterWorld, stable: str | None, canary: str | None) -> VersionRevisions:
    return VersionRevisions(Recorded(), w, stable, canary)  # type: ignore[arg-type]


def test_an_in_place_canary_gets_its_service_and_count_and_never_a_pod() -> None:
    w = world({V1: facts(T1, A1, 4), V2: facts(T1, A2, service=False)}, V2, DEPLOYMENTS, V1, V2)
    calls = run(acting(w, V1, V2), ("ensure", (V2, 1, TEMPLATE, V2)))
    assert calls == [("service", V2, 1, 8000)]  # no Deployment touched: its pods are V1's


def test_the_owner_sizes_its_templates_deployment_after_its_service() -> None:
    w = world({V1: facts(T1, A1, 4), V2: facts(T1, A2, 1)}, V2, DEPLOYMENTS, V1, V2)
    calls = run(acting(w, V1, V2), ("ensure", (V1, 4, TEMPLATE, V2)))
    assert calls == [("service", V1, 4, 8000), ("deployment", T1, 4, T1, True)]


def test_a_promoted_adapter_canary_owns_the_deployment_it_shared() -> None:
    """After a promotion the new stable is the owner (judged by the status the decision
    leaves): its ensure sizes the Deployment, which stays the fleet's size."""
    w = world({V1: facts(T1, A1, 4), V2: facts(T1, A2, 3)}, V2, DEPLOYMENTS, V1, V2)
    calls = run(acting(w, V2, None), ("ensure", (V2, 4, TEMPLATE, V2)))
    assert calls == [("service", V2, 4, 8000), ("deployment", T1, 4, T1, True)]


def test_a_template_release_with_adapters_creates_its_deployment_pending() -> None:
    w = world({V1: facts(T1, A1, 4), V3: facts(T2, A2, service=False)}, V3, DEPLOYMENTS, V1, V3)
    calls = run(acting(w, V1, V3), ("ensure", (V3, 1, TEMPLATE, V3)))
    assert calls == [("service", V3, 1, 8000), ("deployment", T2, 1, T2, True)]


def test_deleting_a_version_keeps_its_templates_pods_while_another_version_runs_on_them() -> None:
    w = world({V1: facts(T1, A1, 4), V2: facts(T1, A2, 4)}, V2, DEPLOYMENTS, V2, None)
    assert run(acting(w, V2, None), ("delete", (V1,))) == [("delete", V1, ("Service",))]


def test_deleting_the_last_version_of_a_template_deletes_its_deployment() -> None:
    """A template release that ended: the old stable and an abandoned in-place canary of the
    old template both go in one decision; the Deployment goes with the second."""
    w = world({V1: facts(T1, A1, 4), V2: facts(T1, A2, 1), V3: facts(T2, A2, 4)}, V3,
              {**DEPLOYMENTS, T2: RevisionState(4, 4, 4, port=8000)}, V3, None)
    calls = run(acting(w, V3, None), ("delete", (V1,)), ("delete", (V2,)))
    assert calls == [("delete", V1, ("Service",)), ("delete", V2, ("Service",)),
                     ("delete", T1, ("Deployment",))]


def test_a_revision_from_before_the_rollout_had_adapters_is_a_plain_one() -> None:
    """Its Deployment is named by its template and no serving version runs on it: scaled,
    deleted and orphaned whole, as without adapters."""
    w = world({V3: facts(T2, A2, service=False)}, V3, DEPLOYMENTS, T1, V3)
    assert w.seen.revisions[T1] == DEPLOYMENTS[T1]
    calls = run(acting(w, T1, V3), ("ensure", (T1, 3, TEMPLATE, V3)), ("orphan", (T1,)),
                ("delete", (T1,)))
    assert calls == [("deployment", T1, 3, "", False), ("orphan", T1, None),
                     ("delete", T1, None)]


def test_orphaning_a_version_orphans_its_service_and_its_templates_deployment() -> None:
    w = world({V1: facts(T1, A1, 4)}, V1, DEPLOYMENTS, V1, None)
    assert run(acting(w, V1, None), ("orphan", (V1,))) == [
        ("orphan", V1, ("Service",)), ("orphan", T1, ("Deployment",))]


def test_the_analysis_and_the_status_name_each_pod_by_what_it_serves() -> None:
    pods = {T1: {"p0": pod("p0", S1, A1), "p1": pod("p1", S2, A2),
                 "p2": pod("p2", S2, A1),  # labelled v2, still serving v1: neither's
                 "p3": pod("p3", None, None),  # moving, unread
                 "p4": pod("p4", S1, None, serving=False)}}
    w = world({V1: facts(T1, A1, 4), V2: facts(T1, A2, 2)}, V2, DEPLOYMENTS, V1, V2, pods)
    assert version_pods(w) == {V1: ("p0",), V2: ("p1",)}
    listed = {p.pod: (p.version, p.adapters) for p in status_pods(w)}
    assert listed == {"p0": (V1, A1), "p1": (V2, A2), "p2": (V2, A1), "p3": (None, None),
                      "p4": (V1, None)}
    assert unread(w) == ["p3"]
    # a version without its Service yet selects no pod, whatever pods carry its set
    w = replace(w, versions={V1: facts(T1, A1, 4), V2: facts(T1, A2, service=False)})
    assert version_pods(w)[V2] == ()


def test_the_evaluation_and_probes_ask_for_the_adapter_the_release_changes() -> None:
    both = {"code": "/c/v3"}
    w = world({V1: facts(T1, {**A1, **both}), V2: facts(T1, {**A2, **both}, service=False),
               V3: facts(T2, {**A2, **both}, service=False)}, V2, DEPLOYMENTS, V1, V2)
    assert released_adapter(w, V1, V2) == "support"  # "code" is the same on both sides
    assert released_adapter(w, V1, V3) is None  # a template release: the base model changed
    assert released_adapter(None, V1, V2) is None  # a rollout without adapters
    assert released_adapter(w, V1, None) is None
    new_one = world({V1: facts(T1, A1), V2: facts(T1, {**A1, "alpha": "/x/v1"})}, V2,
                    DEPLOYMENTS, V1, V2)
    assert released_adapter(new_one, V1, V2) == "alpha"  # an adapter only the canary serves
