"""The adapter planner driving real pods (workloads/adapter_pods.py; docs/adapters.md): the
sandbox's API server, KWOK's pods with addresses, one llm-d-inference-sim per pod with LoRA on,
and the endpoint-slice controller choosing each Service's endpoints by the adapter-set label.

After every move the operator would write, the promise is checked where clients meet it: every
address in a set's Service's EndpointSlices is a pod whose own ``/v1/models`` lists exactly that
set's adapter versions.  A step converges on its pod counts, a rollback returns every pod to the
stable set, and no pod is restarted or replaced on the way (uids and start times unchanged).
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from inference_rollout.api import ADAPTER_SET_PENDING, LABEL_ADAPTER_SET
from inference_rollout.core.adapter_plan import plan, serving_version, set_id
from inference_rollout.core.capacity import in_place_canary_pods
from inference_rollout.core.revision import revision_name
from inference_rollout.core.serving_versions import ServingVersionFacts, in_place
from inference_rollout.kube import Kube, load_configuration
from inference_rollout.workloads import adapter_world
from inference_rollout.workloads.adapter_pods import AdapterPods
from inference_rollout.workloads.lora import VLLMAdapters
from inference_rollout.workloads.revisions import Revisions
from irsandbox import manifests
from irsandbox.podspec import LABEL_REVISION, LABEL_ROLLOUT

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]

PODS, PORT, DRAIN = 3, 8000, 1.0
V1 = {"support": "/adapters/support/v1", "code": "/adapters/code/v3"}
V2 = {"support": "/adapters/support/v2", "code": "/adapters/code/v3"}
S1, S2 = set_id(V1), set_id(V2)
SETS = {S1: V1, S2: V2}
SELECTOR = {LABEL_ROLLOUT: "chat", LABEL_REVISION: "lora"}


def lora_deployment() -> dict[str, Any]:
    """Three vLLM pods with runtime LoRA, new pods labelled ``pending`` (no Service's yet)."""
    dep = manifests.vllm_deployment("chat-lora", revision="lora", replicas=PODS,
                                    labels={LABEL_ADAPTER_SET: ADAPTER_SET_PENDING})
    dep["spec"]["template"]["spec"]["containers"][0]["args"] += ["--enable-lora",
                                                                 "--max-loras", "4"]
    return dep


#: The serving versions of the two sets on the one template ("lora"), and their Services.
VERSIONS = {S1: serving_version("lora", V1), S2: serving_version("lora", V2)}
SERVICES = {s: revision_name("chat", v) for s, v in VERSIONS.items()}


def facts(adapter_set: str, pods: int) -> ServingVersionFacts:
    return ServingVersionFacts("lora", adapter_set, pods, adapters=SETS[adapter_set])


async def ensure_services(kube: Kube, namespace: str, uid: str,
                          pods: dict[str, int]) -> dict[str, ServingVersionFacts]:
    """Each set's Service as the operator writes it (``Revisions.ensure_version``), and the
    serving versions as it reads them back from the API server."""
    revisions = Revisions(kube, namespace, "chat", uid)
    for adapter_set, version in VERSIONS.items():
        await revisions.ensure_version(version, facts(adapter_set, pods[adapter_set]), PORT)
    return await revisions.observe_versions()


class Fleet:
    """The pods, their Services, and the promise checked at the endpoints."""

    def __init__(self, kit: Any, ns: str) -> None:
        self.kit, self.ns = kit, ns

    def endpoint_addresses(self, service: str) -> set[str]:
        slices = self.kit.kubectl("-n", self.ns, "get", "endpointslices", "-l",
                                  f"kubernetes.io/service-name={service}", "-o", "json")
        out: set[str] = set()
        for s in json.loads(slices)["items"]:
            for ep in s.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready"):
                    out.update(ep.get("addresses") or [])
        return out

    def check_promise(self) -> dict[str, int]:
        """Every address in a set's endpoints serves exactly that set; the count per set."""
        counts = {}
        for adapter_set, name in SERVICES.items():
            addresses = self.endpoint_addresses(name)
            for ip in addresses:
                models = httpx.get(f"http://{ip}:{PORT}/v1/models", timeout=5).json()["data"]
                loaded = {m["id"]: m["root"] for m in models if m.get("parent")}
                assert loaded == SETS[adapter_set], (
                    f"{ip} is in {name}'s endpoints but serves {loaded}")
            counts[adapter_set] = len(addresses)
        return counts

    def identities(self) -> dict[str, tuple[str, str]]:
        """Each pod's uid and its container's start: unchanged means no restart, no new pod."""
        return {p["metadata"]["name"]: (
            p["metadata"]["uid"],
            p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
            for p in self.kit.pods(self.ns, f"{LABEL_REVISION}=lora")}


async def drive(pods: AdapterPods, fleet: Fleet, canary: str | None, weight: int,
                timeout: float = 90) -> dict[str, int]:
    """Plan and apply until the step is in place, checking the promise after every move."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        observed = await pods.observe(SELECTOR, PORT)
        now = datetime.now(UTC)
        pl = plan([o.adapters for o in observed.values()], SETS, S1, canary,
                  in_place_canary_pods(PODS, weight), now, DRAIN)
        if not pl.moves and pl.wake_in is None and sum(pl.in_place.values()) == PODS:
            return dict(pl.in_place)
        for move in pl.moves:
            failures = await pods.apply([move], observed, now)
            assert not failures, failures
            await asyncio.sleep(0.3)  # the endpoint-slice controller's turn
            fleet.check_promise()
        await asyncio.sleep(min(pl.wake_in or 0.5, 2))
    raise AssertionError(f"step {canary} at {weight}% not in place in {timeout}s")


def test_the_planner_moves_real_pods_between_adapter_sets_without_a_restart(kit, namespace):
    # The Services' owner: a rollout object (no operator runs here), so garbage collection,
    # which deletes what an absent owner owns, leaves them.
    owner = kit.apply_rollout(namespace, manifests.inference_rollout("chat"))
    kit.create(namespace, lora_deployment())
    kit.wait_serving(namespace, f"{LABEL_REVISION}=lora", PODS)
    fleet = Fleet(kit, namespace)
    before = fleet.identities()

    async def with_kube(run: Any) -> Any:
        kube = Kube(await load_configuration(kit.env["KUBECONFIG"]))
        try:
            return await run(kube)
        finally:
            await kube.close()

    seen = asyncio.run(with_kube(lambda kube: ensure_services(
        kube, namespace, owner["metadata"]["uid"], {S1: PODS, S2: 0})))
    assert seen == {VERSIONS[S1]: facts(S1, PODS), VERSIONS[S2]: facts(S2, 0)}
    assert fleet.endpoint_addresses(SERVICES[S1]) == set()  # pending pods: in no Service yet

    async def scenario(kube: Kube) -> list[dict[str, int]]:
        async with httpx.AsyncClient() as client:
            pods = AdapterPods(kube, VLLMAdapters(client), namespace)
            steps = [await drive(pods, fleet, None, 0),    # new pods get the stable set
                     await drive(pods, fleet, S2, 20),
                     await drive(pods, fleet, S2, 50)]
            # What decide would see now (the reconciler's observe step, on the real objects).
            revisions = Revisions(kube, namespace, "chat", owner["metadata"]["uid"])
            world = await adapter_world.observe(revisions, pods, "chat", "lora", V2,
                                                VERSIONS[S1], VERSIONS[S2])
            seen_ready.update({v: r.ready for v, r in world.seen.revisions.items()})
            assert world.spec_version == VERSIONS[S2]
            assert in_place(world.seen.templates, VERSIONS[S1], VERSIONS[S2])
            steps.append(await drive(pods, fleet, None, 0))    # rolled back
            return steps

    seen_ready: dict[str, int] = {}
    steps = asyncio.run(with_kube(scenario))
    k20, k50 = in_place_canary_pods(PODS, 20), in_place_canary_pods(PODS, 50)
    assert steps == [{S1: PODS}, {S2: k20, S1: PODS - k20}, {S2: k50, S1: PODS - k50}, {S1: PODS}]
    # At 50 %: the stable's version owns the Deployment, the canary's is in place, and each
    # is ready with exactly the pods its set holds.
    assert seen_ready == {VERSIONS[S1]: PODS - k50, VERSIONS[S2]: k50}
    time.sleep(1)
    assert fleet.check_promise() == {S1: PODS, S2: 0}
    assert fleet.identities() == before  # the same pods, never restarted
    # A count asked again is recorded on the existing Service (no new object).
    again = asyncio.run(with_kube(lambda kube: ensure_services(
        kube, namespace, owner["metadata"]["uid"], {S1: PODS, S2: 2})))
    assert again[VERSIONS[S2]].pods == 2
