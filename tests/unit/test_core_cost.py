"""What a release cost (issue 33, item 4), through the reconciler against the in-memory API
server: the record a rolled-back release leaves, told once, and the pieces it is made of.
(The promoted path is in test_core_decide.py; a crash between actions and the status write
recording the same cost is property (g) in test_core_properties.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.coresim import with_model
from tests.unit.test_reconciler_against_memory_api import DEPLOYMENTS, NAME, NS, ROLLOUT, Cluster

from inference_rollout import operator_metrics
from inference_rollout.api.spec import PodTemplate
from inference_rollout.core.cost import gpus_per_pod


def with_gpus(spec: dict[str, Any], gpus: int) -> dict[str, Any]:
    spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return spec


def test_a_rolled_back_release_records_what_it_cost_and_says_it_once() -> None:
    c = Cluster()
    c.reconcile()
    c.reconcile()
    c.kube.objects[ROLLOUT]["spec"] = with_gpus(with_model(c.body["spec"], "m2"), 2)
    c.kube.objects[ROLLOUT]["metadata"]["generation"] += 1
    c.reconcile()  # the canary's Deployment
    canary = c.status["canaryRevision"]
    c.reconcile()  # its pod Ready: 5 %
    for _ in range(3):
        c.reconcile(15)  # analysis counts the canary's requests (1000 per look here)
    started = c.status["releaseCost"]
    assert started["revision"] == canary and started.get("outcome") is None
    assert started["podsStarted"] == 1 and started["canaryRequests"] > 0
    c.source.errors = 500.0
    c.reconcile(15)
    st = c.status
    assert st["abortReason"] == "AnalysisFailed"
    cost = st["releaseCost"]
    assert cost["outcome"] == "RolledBack"
    assert cost["rolledBackRequests"] == cost["canaryRequests"] >= 1000
    # one surge pod from the canary's first look to the rollback, 2 GPUs each
    assert cost["podSeconds"] > 0 and cost["gpuSeconds"] == pytest.approx(2 * cost["podSeconds"])
    assert cost["decidedAfter"] >= cost["stepsReachedAfter"][0]
    series = operator_metrics.REGISTRY.render()
    assert (f'inference_rollout_release_cost{{name="{NAME}",namespace="{NS}",quantity='
            f'"rolled_back_requests",revision="{canary}"}} {cost["rolledBackRequests"]}'
            in series), series
    told = [e for e in c.events if e.reason == "ReleaseCost"]
    assert len(told) == 1 and f"release {canary} RolledBack" in told[0].message
    assert "answered by a canary then rolled back" in told[0].message
    # the canary drains for abortScaleDownDelay: still charged, told no more
    before = cost["podSeconds"]
    c.reconcile(10)
    assert c.status["releaseCost"]["podSeconds"] > before
    assert f"{DEPLOYMENTS}/{NAME}-{canary}" in c.kube.objects
    assert len([e for e in c.events if e.reason == "ReleaseCost"]) == 1
    # once the canary has drained (abortScaleDownDelay 30s) the record is final: a reconcile
    # of the Degraded rollout writes nothing
    for _ in range(3):
        c.reconcile(15)
    final = c.status["releaseCost"]
    assert final.get("extraPods", 0) == 0
    c.reconcile(15)
    assert c.status["releaseCost"] == final
    assert not [w for w in c.kube.writes("PATCH") if w[1].endswith("/status")]
    # `kubectl inference-rollout retry`: the same revision released again, counted afresh
    c.source.errors = 0.0
    c.kube.objects[ROLLOUT]["status"]["requests"] = {"retry": True}
    c.reconcile()
    again = c.status["releaseCost"]
    assert again["revision"] == canary and again.get("outcome") is None
    assert again["startedAt"] > cost["startedAt"] and again.get("canaryRequests", 0) == 0


@pytest.mark.parametrize(("resources", "gpus"), [
    ({"limits": {"nvidia.com/gpu": 4}}, 4),
    ({"requests": {"nvidia.com/gpu": "2"}}, 2),
    ({"limits": {"cpu": "8"}}, 0),
    (None, 0),
])
def test_gpus_per_pod_reads_the_gpu_limit(resources: dict[str, Any] | None, gpus: int) -> None:
    c: dict[str, Any] = {"name": "vllm", "image": "v",
                         "ports": [{"name": "http", "containerPort": 8000}]}
    if resources is not None:
        c["resources"] = resources
    assert gpus_per_pod(PodTemplate(spec={"containers": [c]})) == gpus


def test_the_probes_of_the_release_are_in_its_cost_and_its_event() -> None:
    from datetime import UTC, datetime, timedelta

    from tests.unit.coresim import manifest_spec

    from inference_rollout.api.spec import InferenceRolloutSpec
    from inference_rollout.api.status import InferenceRolloutStatus
    from inference_rollout.core.cost import account, summary
    from inference_rollout.core.types import Observation, ProbeCounts

    spec = InferenceRolloutSpec.parse(manifest_spec())
    t0 = datetime(2026, 12, 7, tzinfo=UTC)
    running = InferenceRolloutStatus(stable_revision="a" * 10, canary_revision="b" * 10,
                                     current_step=0, step_entered_at="2026-12-07T00:00:00Z")
    cost, _ = account(spec, running, Observation(1, "b" * 10, probes=ProbeCounts(
        "b" * 10, 40, 12.5)), (), t0)
    assert cost is not None and (cost.probe_requests, cost.probe_seconds) == (40, 12.5)
    # a restarted operator's probes count from zero again: the record keeps the larger
    cost2, _ = account(spec, running.model_copy(update={"release_cost": cost}),
                       Observation(1, "b" * 10, probes=ProbeCounts("b" * 10, 6, 1.0)), (),
                       t0 + timedelta(seconds=5))
    assert cost2 is not None and cost2.probe_requests == 40
    # another canary's probes are not this release's
    cost3, _ = account(spec, running.model_copy(update={"release_cost": cost2}),
                       Observation(1, "b" * 10, probes=ProbeCounts("c" * 10, 900, 99.0)), (),
                       t0 + timedelta(seconds=10))
    assert cost3 is not None and cost3.probe_requests == 40
    assert "40 probe requests (12 serving seconds)" in summary(cost3)
