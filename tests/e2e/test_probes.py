"""Evidence on demand (issue 30, item 4), end to end on the sandbox: the operator probes the
canary's and the stable's Services itself (spec.analysis.probes), through the sandbox's service
proxy as it reaches Services in a cluster, and decides from what its probes measured, with no
Prometheus at all.

At 4 req/s of users a 5 % canary gets one user request every 5 s: a verdict from users alone
takes minutes (tests/e2e/test_low_traffic.py).  Probes at 5 per second bring the evidence in
seconds: a canary whose every answer is 4× over the limit goes back on its 2nd or 3rd probe
answer (a bad answer wakes the analysis at once), before users have met it more than once or
twice, and a healthy one is promoted through 5/20/50/100 in about the sum of
its holds.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from irsandbox.cluster import Cluster
from irsandbox.harness import OperatorProcess, TrafficWatch
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

USERS_RATE = 4.0  # req/s in all: the 5 % canary gets one every ~5 s
PROBE_TTFT = {"name": "probe-ttft-p99", "template": "probe-ttft-p99", "max": 0.45}


def probed(name: str, cluster: Cluster, steps: list[dict[str, Any]], rate: float,
           **probes: Any) -> dict[str, Any]:
    """A rollout analysed by its probes alone: no Prometheus, the probes' TTFT against the
    breach line of a 300 ms SLO (×1.5) and their error rate (implied, ≤ 1 %)."""
    m = sandbox_rollout(name, prometheus=cluster.env["PROMETHEUS_URL"], steps=steps,
                        metrics=[PROBE_TTFT], progress_deadline="30s",
                        analysis={"verdicts": "Sequential",
                                  "probes": {"ratePerSecond": rate, "timeout": "10s",
                                             **probes}})
    del m["spec"]["analysis"]["prometheus"]
    return m


def test_a_gross_canary_is_rolled_back_by_the_probes_before_users_meet_it(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a rollout analysed by probes at 1/s, Healthy on v1, and users at 4 req/s
    rel = Release(cluster, operator_process, namespace, probed(
        "probed", cluster, [{"weight": 5, "pause": "10m"}, {"weight": 100}], rate=1))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    watch = TrafficWatch(cluster.env, rel.host, rate=USERS_RATE).start()
    try:
        # When v2 answers its first token after 2 s
        rel.apply(with_template(rel.manifest, version="v2", ttft_ms=2000))
        v2 = rel.wait(lambda s: s.get("canaryWeight") == 5, 90, "canary at 5%")["canaryRevision"]
        at_5 = time.monotonic()
        # Then the probes roll it back within seconds of its weight
        st = rel.wait(lambda s: s.get("phase") == "Degraded", 60, "rolled back")
        took = time.monotonic() - at_5
        time.sleep(2)  # answers in flight at the rollback
    finally:
        report = watch.stop()
    result = st["analysis"]["probe-ttft-p99"]
    assert result["verdict"] == "Fail", result
    assert result["requests"] <= 3, result  # the probes' 2nd or 3rd answer decided
    users_on_canary = sum(1 for r in report.results if r.revision == v2)
    cost = st["releaseCost"]
    print(f"rolled back {took:.1f}s after 5% on {result['requests']} probe answers "
          f"({result['test']}); users answered by the canary: {users_on_canary}; "
          f"probes sent {cost['probeRequests']} ({cost['probeSeconds']:.1f} serving s)")
    assert users_on_canary <= 3, users_on_canary
    assert cost["probeRequests"] >= 2 and cost["probeSeconds"] > 0, cost
    assert rel.route() == {v1: 100, v2: 0}


def test_a_healthy_canary_without_users_is_promoted_on_probes_alone(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a rollout analysed by probes at 5/s, and no user traffic at all
    steps = [{"weight": w, "pause": "30s"} for w in (5, 20, 50)] + [{"weight": 100}]
    rel = Release(cluster, operator_process, namespace, probed("quiet", cluster, steps, rate=5))
    rel.apply()
    rel.wait_healthy()
    # When a healthy v2 is released
    began = time.monotonic()
    rel.apply(with_template(rel.manifest, version="v2"))
    v2 = rel.wait(lambda s: s.get("canaryRevision") is not None, 60, "canary")["canaryRevision"]
    # Then it is promoted through its steps, every verdict from the probes
    st = rel.wait_healthy(revision=v2, timeout=300)
    took = time.monotonic() - began
    cost = st["releaseCost"]
    print(f"promoted in {took:.0f}s (holds sum 90 s); probes sent {cost['probeRequests']}")
    assert took <= 240, took
    assert cost["outcome"] == "Promoted" and cost["probeRequests"] >= 100, cost


def test_a_canary_that_fails_its_warmup_probes_never_gets_a_weight(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a rollout whose first weight waits for 3 canary probes to answer (warmupRequests)
    rel = Release(cluster, operator_process, namespace, probed(
        "warm", cluster, [{"weight": 5, "pause": "10m"}, {"weight": 100}], rate=2,
        warmupRequests=3))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    # When v2 fails every request
    rel.apply(with_template(rel.manifest, version="v2", failure_rate=100))
    # Then it waits, warming up, and is rolled back at the progress deadline without a weight
    warming = rel.wait(lambda s: "warming canary" in (s.get("message") or ""), 60, "warming up")
    assert warming["canaryWeight"] == 0 and "0/3 probes answered" in warming["message"]
    st = rel.wait(lambda s: s.get("aborted"), 90, "rolled back")
    assert st["abortReason"] == "WarmupNotDone", st
    assert st["releaseCost"]["stepsReachedAfter"] == []  # no step's weight was ever in force
    assert rel.route().get(v1) == 100, rel.route()
