"""Verdicts at the traffic real LLM canaries see (issue 10), end to end on the sandbox.

About 4 requests per second in all, so a 5% canary sees one request every five seconds: the
window rule (minSamples per window) never decides there.  The sequential rule accumulates the
step's evidence: a canary whose every request is far over the SLO goes back within a handful of
its requests, a healthy one passes once its requests suffice, an undecided step stops at its
``inconclusiveLimit`` with an Event, and a canary that loses its pods loses its weight at once.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from irsandbox.cluster import Cluster
from irsandbox.common import wait_for
from irsandbox.harness import BackgroundLoad, OperatorProcess, TrafficWatch
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

#: "about 4 req/s in all" (issue 10)
RATE = 4.0
#: A canary whose every request breaches, at 0.2 req/s: the 2nd request decides (issue 30); the
#: 3rd is often already on its way (its TTFT alone is 2 s; a look every 5 s after a 1 s scrape),
#: and Prometheus' increase() may count 1.9 of 2 (the fail side rounds down): one look later
CANARY_ANSWERS_AT_MOST = 5
SEQUENTIAL: dict[str, Any] = {"verdicts": "Sequential", "slo": {"ttftP99": "300ms"}}


def _low_traffic(name: str, cluster: Cluster, steps: list[dict[str, Any]],
                 **analysis: Any) -> dict[str, Any]:
    return sandbox_rollout(name, prometheus=cluster.env["PROMETHEUS_URL"], steps=steps, metrics=[],
                   analysis={**SEQUENTIAL, **analysis})


def test_a_2s_ttft_canary_at_5_percent_of_4_rps_is_rolled_back_within_two_minutes(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a release at 5% of about 4 req/s (one canary request every ~5 s), SLO 300 ms
    rel = Release(cluster, operator_process, namespace, _low_traffic(
        "slow", cluster, [{"weight": 5, "pause": "10m"}, {"weight": 100}]))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    # every answer kept, so the canary's are counted where users meet it: at the gateway
    watch = TrafficWatch(cluster.env, rel.host, rate=RATE).start()
    try:
        # When the canary answers its first token after 2 s (the breach line is 0.45 s)
        rel.apply(with_template(rel.manifest, version="v2", ttft_ms=2000))
        st = rel.wait(lambda s: s.get("canaryWeight") == 5, 90, "canary at 5%")
        v2 = st["canaryRevision"]
        at_5 = time.monotonic()
        # Then it is rolled back within two minutes, on a handful of its requests
        st = rel.wait(lambda s: s.get("phase") == "Degraded", 120, "rolled back")
        took = time.monotonic() - at_5
        result = st["analysis"]["slo-ttft-p99"]
        assert result["verdict"] == "Fail", result
        # the fail side's mixture (issue 30): every request of this canary is over the line,
        # and its 2nd is enough (one alone never is); a look may come a request later
        assert result["requests"] <= 8 and 2 <= result["badRequests"] <= 4, result
        assert "over 0.45" in result["test"], result
        # the rollback is recorded before traffic moves (a crash between them must not lose
        # it): the route follows the status a moment later
        wait_for(lambda: rel.route()[v1] == 100, 10, "the route back on stable", interval=0.2,
                 tolerate=())
    finally:
        report = watch.stop()
    # the users' side: the canary answered the 2 requests that decide, and those already on
    # their way to it while the evidence was scraped, looked at (every 5 s) and acted on
    served = report.by_revision.get(v2, 0)
    print(f"rolled back {took:.0f}s after 5%: {result['test']}; the canary answered {served} "
          f"of {report.requests} requests through the gateway")
    assert 2 <= served <= CANARY_ANSWERS_AT_MOST, report.summary()


@pytest.mark.timeout(660)
def test_a_healthy_canary_at_5_percent_of_4_rps_is_promoted_on_the_release_evidence(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given steps that end on evidence (no bake time) from 5 %, at about 4 req/s in all: the
    # canary starts at one request every ~5 s
    rel = Release(cluster, operator_process, namespace, _low_traffic(
        "healthy", cluster, [{"weight": 5}, {"weight": 20}, {"weight": 50}, {"weight": 100}]))
    rel.apply()
    rel.wait_healthy()
    load = BackgroundLoad(cluster.env, rel.host, rate=RATE)
    try:
        # When a healthy canary (5 ms to the first token) is released
        rel.apply(with_template(rel.manifest, version="v2"))
        v2 = rel.wait_canary()
        started = time.monotonic()
        # Then each step passes on the release's clean requests (issue 30, item 3: 23 to go to
        # 20 %, 56 to 50 %, 112 to 100 %, 224 to be promoted; 112 at every step before, about
        # 9 min for the 5 % step alone), and it is promoted within the 8 minutes
        st = rel.wait_healthy(revision=v2, timeout=480)
        took = time.monotonic() - started
        assert not st.get("aborted")
        passes = [e for e in rel.events() if e.startswith("AnalysisVerdict: slo-ttft-p99: Pass")]
        carried = [e for e in passes if "this release" in e]
        assert carried, passes
        print(f"promoted {took:.0f}s after the release; {passes[-1]}")
    finally:
        load.stop()


def test_an_undecided_step_pauses_at_its_inconclusive_limit_with_an_event(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a trickle of traffic (a canary request every ~5 s at 20% of 1 req/s: far from the
    # ~112 clean requests a pass needs) and a 20 s limit
    rel = Release(cluster, operator_process, namespace, _low_traffic(
        "quiet", cluster, [{"weight": 20, "pause": "5s"}, {"weight": 100}],
        inconclusiveLimit="20s", onInconclusive="Pause",
        consecutiveErrorLimit=50))  # a canary's series appear with its first request
    rel.apply()
    rel.wait_healthy()
    load = BackgroundLoad(cluster.env, rel.host, rate=1)
    try:
        rel.apply(with_template(rel.manifest, version="v2"))
        rel.wait(lambda s: s.get("canaryWeight") == 20, 90, "canary at 20%")
        # Then the step pauses at its limit, and the Event says how much traffic a verdict needs
        st = rel.wait(lambda s: s.get("phase") == "Paused", 90, "paused at the limit")
        assert st.get("canaryWeight") == 20 and st.get("currentStep") == 0
        limit = [e for e in rel.events() if e.startswith("InconclusiveLimit:")]
        assert limit and "request" in limit[0], rel.events()
    finally:
        load.stop()


def _node(name: str, pool: str) -> dict[str, Any]:
    """A KWOK-managed GPU node of its own, so a test can cordon it without touching others."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
        "labels": {"type": "kwok", "e2e-pool": pool, "kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                "nvidia.com/gpu": "8"},
                   "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                   "nvidia.com/gpu": "8"}}}


def test_a_canary_whose_pods_are_lost_loses_its_weight_within_one_interval(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    import json

    node = f"gpu-{namespace}"
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_node(node, namespace)))
    try:
        # Given a canary at 20% whose pods can run only on one GPU node
        rel = Release(cluster, operator_process, namespace, sandbox_rollout(
            "lost", prometheus=cluster.env["PROMETHEUS_URL"],
            steps=[{"weight": 20, "pause": "30s"}, {"weight": 100}],
            analysis={"verdicts": "Window"}))
        rel.apply()
        v1 = rel.wait_healthy()["stableRevision"]
        load = BackgroundLoad(cluster.env, rel.host)
        try:
            canary = with_template(rel.manifest, version="v2")
            canary["spec"]["template"]["spec"]["nodeSelector"] = {"e2e-pool": namespace}
            rel.apply(canary)
            rel.wait(lambda s: s.get("canaryWeight") == 20, 90, "canary at 20%")
            v2 = rel.status()["canaryRevision"]
            # When that node stops taking pods and the canary's pods are deleted
            cluster.kubectl("cordon", node)
            lost = time.monotonic()
            cluster.kubectl("delete", "pods", "-n", namespace, "--wait=false",
                     "-l", f"rollouts.inference.dev/revision={v2}")
            # Then the canary's weight is back on stable within one analysis interval (5 s)
            rel.wait(lambda s: s.get("canaryWeight") == 0, 15, "canary weight back to 0")
            took = time.monotonic() - lost
            assert rel.route() == {v1: 100, v2: 0}
            assert any(e.startswith("CanaryUnavailable:") for e in rel.events())
            assert took <= 5 + 3, f"weight back on stable after {took:.1f}s"
            # And when the node takes pods again, the release goes on and is promoted
            cluster.kubectl("uncordon", node)
            rel.wait_healthy(revision=v2, timeout=180)
        finally:
            load.stop()
    finally:
        cluster.kubectl("delete", "node", node, "--wait=false")
