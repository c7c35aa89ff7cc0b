"""Gray releases end to end on the sandbox: real API server, real Prometheus scraping vLLM
simulators, real nginx carrying traffic by the HTTPRoute's weights, the operator as a process.

Each test reads as Given / When / Then.
"""

from __future__ import annotations

import pytest

from irsandbox.harness import Cluster, OperatorProcess, wait_for
from irsandbox.loadgen import LoadReport

from .scenario import BackgroundLoad, Release, measure_shares, rollout, with_template

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SHARE_TOLERANCE = 0.04  # nginx's weighted round robin is exact; 4 pp covers a burst boundary


def test_release_promoted_through_every_step(cluster: Cluster, operator_process: OperatorProcess,
                                             namespace: str) -> None:
    # Given a healthy rollout serving v1 under steady load
    rel = Release(cluster, operator_process, namespace,
                  rollout("chat", prometheus=cluster.env["PROMETHEUS_URL"],
                          analysis={"slo": {"ttftP99": "200ms"}}))
    v1, load = rel.healthy_under_load()
    try:
        # When the template changes to v2
        rel.apply(with_template(rel.manifest, version="v2"))
        v2 = rel.wait_canary()
        # Then traffic through nginx follows each step's weight
        for weight in (5, 20, 50):
            rel.wait(lambda s, w=weight: s.get("canaryWeight") == w and
                     s.get("canaryRevision") == v2, 90, f"canary at {weight}%")
            assert rel.route() == {v1: 100 - weight, v2: weight}
            # nginx follows the route a moment after the API server holds it
            shares = wait_for(
                lambda w=weight: _near(measure_shares(cluster.env, rel.host), v2, w),
                10, f"nginx at {weight}%", interval=0.2)
            assert shares.failed == 0, shares.summary()
            assert abs(shares.share(v2) - weight / 100) <= SHARE_TOLERANCE, shares.summary()
        # and the release ends promoted: v2 stable, all traffic on it, v1 scaled away
        st = rel.wait_healthy(revision=v2, timeout=90)
        assert st["analysis"]["errors"]["verdict"] == "Pass"
        assert st["analysis"]["slo-ttft-p99"]["verdict"] == "Pass"
        assert rel.route() == {v2: 100}
        settle_on(cluster, rel, v2)
        assert measure_shares(cluster.env, rel.host, 100).share(v2) == 1.0
        rel.wait(lambda s: f"chat-{v1}" not in cluster.deployments(namespace), 60,
                 "old stable scaled away")
        reasons = [e.split(":")[0] for e in rel.events()]
        assert reasons.count("StepWeightSet") >= 4 and "Promoted" in reasons
    finally:
        load.stop()


def _near(shares: LoadReport, canary: str, weight: int) -> LoadReport | None:
    """The burst if the canary's share matches ``weight`` (it was measured after the gateway
    applied the route), else None."""
    return shares if abs(shares.share(canary) - weight / 100) <= SHARE_TOLERANCE else None


def _rolled_back(rel: Release, cluster: Cluster, v1: str, reason: str) -> dict:
    st = rel.wait(lambda s: s.get("phase") == "Degraded", 120, "rolled back (Degraded)")
    assert st["abortReason"] == reason, st.get("message")
    assert st["canaryWeight"] == 0
    canary = st["canaryRevision"]
    assert rel.route() == {v1: 100, canary: 0}
    settle_on(cluster, rel, v1)
    shares = measure_shares(cluster.env, rel.host, 200)
    assert shares.share(v1) == 1.0, shares.summary()
    return st


def settle_on(cluster: Cluster, rel: Release, revision: str) -> None:
    """The gateway applies a route change a moment after the API server holds it (nginx is
    regenerated and reloaded); wait for that before measuring what traffic sees."""
    from irsandbox.harness import wait_for

    wait_for(lambda: measure_shares(cluster.env, rel.host, 40).share(revision) == 1.0, 30,
             f"nginx sending everything to {revision}", interval=1)


def test_ttft_regression_rolls_back(cluster: Cluster, operator_process: OperatorProcess,
                                    namespace: str) -> None:
    # Given v1 answering its first token in ~5 ms, with a TTFT SLO of 100 ms (breach > 150 ms)
    rel = Release(cluster, operator_process, namespace,
                  rollout("ttft", prometheus=cluster.env["PROMETHEUS_URL"],
                          analysis={"slo": {"ttftP99": "100ms"}}))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    load = BackgroundLoad(cluster.env, rel.host)
    try:
        # When v2 takes 400 ms to the first token
        rel.apply(with_template(rel.manifest, ttft_ms=400))
        # Then it is rolled back by itself, traffic through nginx all on v1
        st = _rolled_back(rel, cluster, v1, "AnalysisFailed")
        assert st["analysis"]["slo-ttft-p99"]["verdict"] == "Fail"
        assert st["analysis"]["slo-ttft-p99"]["value"] > 0.15
        assert "slo-ttft-p99" in st["message"]
    finally:
        load.stop()


@pytest.mark.timeout(480)
def test_error_rate_rolls_back(cluster: Cluster, operator_process: OperatorProcess,
                               namespace: str) -> None:
    rel = Release(cluster, operator_process, namespace,
                  rollout("errs", prometheus=cluster.env["PROMETHEUS_URL"]))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    load = BackgroundLoad(cluster.env, rel.host)
    try:
        # When v2 fails 30% of its requests
        rel.apply(with_template(rel.manifest, failure_rate=30))
        st = _rolled_back(rel, cluster, v1, "AnalysisFailed")
        assert st["analysis"]["errors"]["verdict"] == "Fail"
        assert st["analysis"]["errors"]["value"] > 0.01
        # And when the fix is released on the same object, the old Fail is forgotten (it once
        # survived a merge-patched status and held the new canary at 0%): v3 is promoted
        rel.apply(with_template(rel.manifest, version="v3", failure_rate=0))
        v3 = rel.wait(lambda s: s.get("canaryRevision") not in (None, st["canaryRevision"]),
                      60, "v3 released")["canaryRevision"]
        rel.wait(lambda s: (s.get("canaryWeight") or 0) > 0, 90, "v3 receives traffic")
        done = rel.wait_healthy(revision=v3, timeout=180)
        assert done["analysis"]["errors"]["verdict"] == "Pass"
        assert rel.route() == {v3: 100}
    finally:
        load.stop()


BUSINESS_QUERY = (
    'sum(rate(loadgen_business_checks_total{namespace="{{namespace}}",'
    'revision="{{revision}}",result="pass"}[{{window}}])) / '
    'sum(rate(loadgen_business_checks_total{namespace="{{namespace}}",'
    'revision="{{revision}}"}[{{window}}]))'
)


def test_business_metric_below_stable_rolls_back(cluster: Cluster,
                                                 operator_process: OperatorProcess,
                                                 namespace: str) -> None:
    metrics = [{"name": "errors", "template": "error-rate", "max": 0.01},
               {"name": "json-valid", "query": BUSINESS_QUERY, "minRatioToStable": 0.95}]
    rel = Release(cluster, operator_process, namespace,
                  rollout("biz", prometheus=cluster.env["PROMETHEUS_URL"], metrics=metrics,
                          steps=[{"weight": 50, "pause": "20s"}, {"weight": 100}]))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    load = BackgroundLoad(cluster.env, rel.host, json_check=True, metrics_port=18590)
    try:
        # When v2 answers 15% of requests with invalid JSON (stable: all valid)
        rel.apply(with_template(rel.manifest, business_fail_rate=15))
        st = _rolled_back(rel, cluster, v1, "AnalysisFailed")
        biz = st["analysis"]["json-valid"]
        assert biz["verdict"] == "Fail"
        assert biz["value"] < 0.95 * biz["stableValue"]
    finally:
        load.stop()


def test_unschedulable_canary_rolls_back_at_progress_deadline(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    rel = Release(cluster, operator_process, namespace,
                  rollout("big", prometheus=cluster.env["PROMETHEUS_URL"],
                          progress_deadline="15s"))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    # When v2 asks for more GPUs than any node has
    rel.apply(with_template(rel.manifest, gpus=16))
    st = rel.wait(lambda s: s.get("phase") == "Degraded", 90, "progress deadline rollback")
    assert st["abortReason"] == "ProgressDeadlineExceeded"
    assert "unschedulable" in st["message"]
    assert rel.route()[v1] == 100
    assert st["canaryWeight"] == 0


def test_deletion_mid_release_returns_traffic_to_stable(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a user-owned HTTPRoute (the existing-route mode) and a release at 20%
    cluster.custom.create_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "httproutes",
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": "del"},
         "spec": {"parentRefs": [{"name": "sandbox"}], "hostnames": [f"del.{namespace}.test"],
                  "rules": [{"backendRefs": []}]}})
    manifest = rollout("del", prometheus=cluster.env["PROMETHEUS_URL"], metrics=[],
                       steps=[{"weight": 20, "pause": "10m"}, {"weight": 100}])
    manifest["spec"]["traffic"] = {"gatewayAPI": {"httpRouteRef": {"name": "del"}}}
    manifest["spec"]["analysis"] = {"interval": "5s"}
    rel = Release(cluster, operator_process, namespace, manifest)
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    rel.apply(with_template(rel.manifest, version="v2"))
    rel.wait(lambda s: s.get("canaryWeight") == 20, 60, "canary at 20%")
    # When the InferenceRollout is deleted
    cluster.delete_rollout(namespace, "del")
    # Then the route sends everything to stable, which keeps serving (orphaned, not collected)
    from irsandbox.harness import wait_for

    wait_for(lambda: rel.route() == {v1: 100}, 30, "route back to stable")
    wait_for(lambda: not _exists(cluster, namespace), 30, "rollout gone")
    assert f"del-{v1}" in cluster.deployments(namespace)
    settle_on(cluster, rel, v1)
    shares = measure_shares(cluster.env, rel.host, 100)
    assert shares.failed == 0 and shares.share(v1) == 1.0, shares.summary()


def _exists(cluster: Cluster, ns: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        cluster.rollout(ns, "del")
        return True
    except ApiException as e:
        return e.status != 404


def test_inference_pool_backends_are_created_routed_and_removed(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a rollout whose revisions are InferencePools (the sandbox's nginx balances a pool's
    # Ready pods itself, as a gateway without an endpoint picker would)
    manifest = rollout("pool", prometheus=cluster.env["PROMETHEUS_URL"],
                       steps=[{"weight": 50, "pause": "15s"}, {"weight": 100}])
    manifest["spec"]["traffic"]["gatewayAPI"]["backendKind"] = "InferencePool"
    rel = Release(cluster, operator_process, namespace, manifest)
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    assert _pool(cluster, namespace, f"pool-{v1}")["spec"]["selector"]["matchLabels"] == {
        "rollouts.inference.dev/rollout": "pool", "rollouts.inference.dev/revision": v1}
    load = BackgroundLoad(cluster.env, rel.host)
    try:
        # When v2 is released
        rel.apply(with_template(rel.manifest, version="v2"))
        v2 = rel.wait_canary()
        rel.wait(lambda s: s.get("canaryWeight") == 50, 90, "canary at 50%")
        # Then the route names the two pools, and traffic through nginx follows the weights
        assert rel.route() == {v1: 50, v2: 50}
        route = cluster.custom.get_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", namespace, "httproutes", "pool")
        kinds = {ref["kind"] for ref in route["spec"]["rules"][0]["backendRefs"]}
        assert kinds == {"InferencePool"}
        assert _pool(cluster, namespace, f"pool-{v2}")["spec"]["targetPorts"] == [
            {"number": 8000}]
        shares = wait_for(lambda: _near(measure_shares(cluster.env, rel.host), v2, 50), 10,
                          "nginx at 50% over the pools", interval=0.2)
        assert shares.failed == 0, shares.summary()
        # and once v2 is promoted, v1's pool goes with its Deployment
        rel.wait_healthy(revision=v2, timeout=120)
        rel.wait(lambda s: _pool_or_none(cluster, namespace, f"pool-{v1}") is None, 60,
                 "old revision's pool deleted")
        assert _pool_or_none(cluster, namespace, f"pool-{v2}") is not None
    finally:
        load.stop()


def _pool_or_none(cluster: Cluster, ns: str, name: str) -> dict | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return cluster.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
            "inference.networking.k8s.io", "v1", ns, "inferencepools", name)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _pool(cluster: Cluster, ns: str, name: str) -> dict:
    pool = _pool_or_none(cluster, ns, name)
    assert pool is not None, f"InferencePool {ns}/{name} does not exist"
    return pool
