"""Gray releases end to end on the sandbox: real API server, real Prometheus scraping vLLM
simulators, Traefik (a conformant Gateway API implementation) carrying traffic by the HTTPRoute's
weights to pods on their own addresses, the operator as a process. Each weight counts as applied
only once Traefik has accepted that generation of the route.

Each test reads as Given / When / Then.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from inference_rollout.api import LABEL_REVISION
from irsandbox.cluster import TRAEFIK_CONTROLLER, Cluster
from irsandbox.common import wait_for
from irsandbox.harness import OperatorProcess
from irsandbox.manifests import NGINX_PARENT
from irsandbox.story import Given, Story, Then, When

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_release_promoted_through_every_step(given: Given, when: When, then: Then,
                                             story: Story) -> None:
    # Given a healthy rollout serving v1 under steady load
    v1 = given.rollout("chat", analysis={"slo": {"ttftP99": "200ms"}})
    given.load()
    # When the template changes to v2
    when.template_changes(version="v2")
    v2 = then.canary()
    # Then traffic through Traefik follows each step's weight (a moment after the API server
    # holds it)
    then.each_step_carried(v1, v2, (5, 20, 50))
    parents = story.cluster.route(story.ns, "chat")["status"]["parents"]
    assert [p["controllerName"] for p in parents] == [TRAEFIK_CONTROLLER]
    # and the release ends promoted: v2 stable, all traffic on it, v1 scaled away
    st = then.healthy(revision=v2, timeout=90)
    assert st["analysis"]["errors"]["verdict"] == "Pass"
    assert st["analysis"]["slo-ttft-p99"]["verdict"] == "Pass"
    then.route_is({v2: 100})
    then.settles_on(v2)
    assert then.traffic(100).share(v2) == 1.0
    then.status(lambda s: f"chat-{v1}" not in story.cluster.deployments(story.ns), 60,
                "old stable scaled away")
    reasons = [e.split(":")[0] for e in story.release.events()]
    assert reasons.count("StepWeightSet") >= 4 and "Promoted" in reasons


def test_ttft_regression_rolls_back(given: Given, when: When, then: Then) -> None:
    # Given v1 answering its first token in ~5 ms, with a TTFT SLO of 100 ms (breach > 150 ms)
    v1 = given.rollout("ttft", analysis={"slo": {"ttftP99": "100ms"}})
    given.load()
    # When v2 takes 400 ms to the first token
    when.template_changes(ttft_ms=400)
    # Then it is rolled back by itself, traffic through nginx all on v1
    st = then.rolled_back(v1, "AnalysisFailed")
    assert st["analysis"]["slo-ttft-p99"]["verdict"] == "Fail"
    assert st["analysis"]["slo-ttft-p99"]["value"] > 0.15
    assert "slo-ttft-p99" in st["message"]


@pytest.mark.timeout(480)
def test_error_rate_rolls_back(given: Given, when: When, then: Then) -> None:
    v1 = given.rollout("errs")
    given.load()
    # When v2 fails 30% of its requests
    when.template_changes(failure_rate=30)
    st = then.rolled_back(v1, "AnalysisFailed")
    assert st["analysis"]["errors"]["verdict"] == "Fail"
    assert st["analysis"]["errors"]["value"] > 0.01
    # And when the fix is released on the same object, the old Fail is forgotten (it once
    # survived a merge-patched status and held the new canary at 0%): v3 is promoted
    when.template_changes(version="v3", failure_rate=0)
    v3 = then.status(lambda s: s.get("canaryRevision") not in (None, st["canaryRevision"]),
                     60, "v3 released")["canaryRevision"]
    then.status(lambda s: (s.get("canaryWeight") or 0) > 0, 90, "v3 receives traffic")
    done = then.healthy(revision=v3, timeout=180)
    assert done["analysis"]["errors"]["verdict"] == "Pass"
    then.route_is({v3: 100})


BUSINESS_QUERY = (
    'sum(rate(loadgen_business_checks_total{namespace="{{namespace}}",'
    'revision="{{revision}}",result="pass"}[{{window}}])) / '
    'sum(rate(loadgen_business_checks_total{namespace="{{namespace}}",'
    'revision="{{revision}}"}[{{window}}]))'
)


def test_business_metric_below_stable_rolls_back(given: Given, when: When, then: Then) -> None:
    metrics = [{"name": "errors", "template": "error-rate", "max": 0.01},
               {"name": "json-valid", "query": BUSINESS_QUERY, "minRatioToStable": 0.95}]
    v1 = given.rollout("biz", metrics=metrics,
                       steps=[{"weight": 50, "pause": "20s"}, {"weight": 100}])
    given.load(json_check=True, metrics_port=18590)
    # When v2 answers 15% of requests with invalid JSON (stable: all valid)
    when.template_changes(business_fail_rate=15)
    st = then.rolled_back(v1, "AnalysisFailed")
    biz = st["analysis"]["json-valid"]
    assert biz["verdict"] == "Fail"
    assert biz["value"] < 0.95 * biz["stableValue"]


def test_unschedulable_canary_rolls_back_at_progress_deadline(
        given: Given, when: When, then: Then, story: Story) -> None:
    v1 = given.rollout("big", progress_deadline="15s")
    # When v2 asks for more GPUs than any node has
    when.template_changes(gpus=16)
    st = then.degraded(90, "progress deadline rollback")
    assert st["abortReason"] == "ProgressDeadlineExceeded"
    assert "unschedulable" in st["message"]
    assert story.release.route()[v1] == 100
    assert st["canaryWeight"] == 0


def test_deletion_mid_release_returns_traffic_to_stable(
        given: Given, when: When, then: Then, story: Story) -> None:
    # Given a user-owned HTTPRoute (the existing-route mode) and a release at 20%
    given.user_route("del", f"del.{story.ns}.test")
    manifest = given.manifest("del", metrics=[],
                              steps=[{"weight": 20, "pause": "10m"}, {"weight": 100}])
    manifest["spec"]["traffic"] = {"gatewayAPI": {"httpRouteRef": {"name": "del"}}}
    manifest["spec"]["analysis"] = {"interval": "5s"}
    manifest["spec"]["strategy"]["abortScaleDownDelay"] = "10s"
    v1 = given.rollout(manifest=manifest)
    when.template_changes(version="v2")
    st = then.weight_reaches(20, 60)
    v2 = st["canaryRevision"]
    # When the InferenceRollout is deleted, with users' requests flowing all along
    with then.traffic_throughout(rate=40) as during:
        time.sleep(1)
        when.deleted()
        # Then the route sends everything to stable, which keeps serving (orphaned, not
        # collected), and the canary's pods go only after the gateway stopped sending to them
        wait_for(lambda: story.release.route() == {v1: 100}, 30, "route back to stable",
                 interval=0.5, tolerate=())
        deleted_at = time.monotonic()
        # the canary drains: its pods serve on while the gateway follows the route
        assert story.cluster.pods(story.ns, f"{LABEL_REVISION}={v2}")
        wait_for(lambda: not story.cluster.rollouts(story.ns), 60, "rollout gone",
                 interval=0.5, tolerate=())
        assert time.monotonic() - deleted_at > 7, "the rollout went before the canary drained"
        wait_for(lambda: not story.cluster.pods(story.ns, f"{LABEL_REVISION}={v2}"), 60,
                 "the canary's pods gone", interval=0.5, tolerate=())
        time.sleep(2)
    assert during.report is not None
    assert during.report.failed == 0, during.report.summary()
    assert f"del-{v1}" in story.cluster.deployments(story.ns)
    then.settles_on(v1)
    shares = then.traffic(100)
    assert shares.failed == 0 and shares.share(v1) == 1.0, shares.summary()


def test_gateway_error_rate_rolls_a_failing_canary_back(given: Given, when: When,
                                                        then: Then) -> None:
    # Given a rollout judged by the gateway's counters (Traefik's), not the engine's
    metrics = [{"name": "gateway-errors", "template": "gateway-error-rate",
                "gateway": "traefik", "max": 0.01}]
    v1 = given.rollout(manifest=given.manifest("gwerr", metrics=metrics))
    given.load()
    # When v2 fails 30 % of its requests
    when.template_changes(failure_rate=30)
    # Then Traefik's 5xx for the canary's Service roll it back
    st = then.rolled_back(v1, "AnalysisFailed")
    assert st["analysis"]["gateway-errors"]["verdict"] == "Fail"
    assert st["analysis"]["gateway-errors"]["value"] > 0.01


@pytest.fixture()
def pool_story(cluster: Cluster, operator_process: OperatorProcess,
               namespace: str) -> Iterator[Story]:
    """A story whose load goes through the nginx translator: Traefik has no InferencePool
    backends (docs/sandbox.md, "Gateways")."""
    via = Cluster({**cluster.env, "GATEWAY_URL": cluster.env["NGINX_GATEWAY_URL"]})
    s = Story(via, operator_process, namespace)
    yield s
    s.close()
    via.close()


def test_inference_pool_backends_are_created_routed_and_removed(pool_story: Story) -> None:
    story = pool_story
    given, when, then = story.given, story.when, story.then
    # Given a rollout whose revisions are InferencePools under the nginx translator's Gateway
    # (it balances a pool's Ready pods itself, as a gateway without an endpoint picker would)
    manifest = given.manifest("pool", steps=[{"weight": 50, "pause": "15s"}, {"weight": 100}])
    manifest["spec"]["traffic"]["gatewayAPI"]["backendKind"] = "InferencePool"
    manifest["spec"]["traffic"]["gatewayAPI"]["parentRefs"] = [dict(NGINX_PARENT)]
    v1 = given.rollout(manifest=manifest)
    assert _pool(story, f"pool-{v1}")["spec"]["selector"]["matchLabels"] == {
        "rollouts.inference.dev/rollout": "pool", "rollouts.inference.dev/revision": v1}
    given.load()
    # When v2 is released
    when.template_changes(version="v2")
    v2 = then.canary()
    then.weight_reaches(50)
    # Then the route names the two pools, and traffic through nginx follows the weights
    then.route_is({v1: 50, v2: 50})
    route = story.cluster.route(story.ns, "pool")
    kinds = {ref["kind"] for ref in route["spec"]["rules"][0]["backendRefs"]}
    assert kinds == {"InferencePool"}
    assert _pool(story, f"pool-{v2}")["spec"]["targetPorts"] == [{"number": 8000}]
    shares = then.traffic_near(v2, 50)
    assert shares.failed == 0, shares.summary()
    # and once v2 is promoted, v1's pool goes with its Deployment
    then.healthy(revision=v2, timeout=120)
    then.status(lambda s: story.cluster.pool(story.ns, f"pool-{v1}") is None, 60,
                "old revision's pool deleted")
    assert story.cluster.pool(story.ns, f"pool-{v2}") is not None


def _pool(story: Story, name: str) -> dict[str, Any]:
    pool = story.cluster.pool(story.ns, name)
    assert pool is not None, f"InferencePool {story.ns}/{name} does not exist"
    return pool
