"""The business evaluation gate end to end: before the first traffic shift the operator sends
the ConfigMap's cases to the canary's and the stable's Services (through the sandbox gateway's
forward proxy, as ``--service-proxy``) and blocks a canary that scores worse.

The simulators echo the prompt, so a prompt that is itself JSON gets a JSON reply; a pod
annotated ``sim.inference.dev/business-fail-rate: "30"`` has its shim put prose before 30% of
its replies, which the ``json-valid`` scorer fails.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from irsandbox.harness import OperatorProcess
from irsandbox.story import Given, Story, Then, When

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CASES = "\n".join(
    json.dumps({"prompt": json.dumps({"order": i, "status": "shipped", "items": [i, i + 1]}),
                "scorer": "json-valid"})
    for i in range(30))


def evaluated(name: str, given: Given, story: Story) -> str:
    """A healthy rollout with an evaluation set of JSON cases (a ConfigMap); its stable revision."""
    story.cluster.core.create_namespaced_config_map(story.ns, {
        "metadata": {"name": "eval-cases"}, "data": {"cases.jsonl": CASES}})
    m = given.manifest(name)
    m["spec"]["evaluation"] = {"configMapRef": {"name": "eval-cases"}, "sampleSize": 20,
                               "concurrency": 4, "timeout": "10s", "maxDropPoints": 5}
    return given.rollout(manifest=m)


def test_a_canary_that_breaks_json_is_rolled_back_before_any_traffic(
        given: Given, when: When, then: Then, story: Story,
        operator_process: OperatorProcess) -> None:
    # Given a healthy rollout with an evaluation set of JSON cases
    v1 = evaluated("evfail", given, story)
    # When a release's pods corrupt 30% of their JSON replies
    when.template_changes(version="v2", business_fail_rate=30)
    # Then it is rolled back before any traffic, with both scores in status and an Event
    st = then.degraded()
    assert st["abortReason"] == "EvaluationFailed", st.get("message")
    ev = st["evaluation"]
    assert ev["verdict"] == "Fail" and ev["revision"] == st["canaryRevision"]
    # the shim corrupts exactly 30% of each pod's replies (20 cases over 1-2 canary pods)
    assert ev["stableScore"] == 100.0 and 65.0 <= ev["canaryScore"] <= 75.0, ev
    assert f"{ev['canaryScore']:.1f}" in st["message"] and "100.0" in st["message"]
    assert st["canaryWeight"] == 0
    then.route_becomes({v1: 100, st["canaryRevision"]: 0})
    events = story.release.events()
    assert any(e.startswith("EvaluationFailed: ") and "100.0" in e for e in events), events
    assert not any(e.startswith("StepWeightSet") for e in events), events
    # and the operator's /metrics counts the run and shows both scores
    series = operator_process.metrics()
    ident = f'name="evfail",namespace="{story.ns}"'
    assert f'inference_rollout_evaluation_runs_total{{{ident},verdict="Fail"}} 1' in series
    canary_score = (f'inference_rollout_evaluation_score{{{ident},revision="{ev["revision"]}",'
                    f'role="canary"}} ')
    shown = [line.removeprefix(canary_score) for line in series.splitlines()
             if line.startswith(canary_score)]
    assert [float(v) for v in shown] == [ev["canaryScore"]], series


def test_a_canary_that_keeps_its_json_is_promoted(
        given: Given, when: When, then: Then, story: Story) -> None:
    # Given a healthy rollout with an evaluation set of JSON cases
    evaluated("evpass", given, story)
    given.load()  # samples for the error-rate analysis
    # When a release answers as well as the stable
    when.template_changes(version="v2")
    v2 = then.canary()
    # Then the evaluation passes (recorded before any traffic) and the release is promoted
    st = then.status(lambda s: s.get("canaryWeight", 0) > 0 or s.get("phase") == "Degraded",
                     120, "the first traffic shift")
    ev = st.get("evaluation") or {}
    assert ev.get("verdict") == "Pass" and ev.get("revision") == v2, st.get("message")
    assert ev["canaryScore"] == 100.0 and ev["stableScore"] == 100.0
    then.healthy(revision=v2, timeout=150)
    events = story.release.events()
    assert any(e.startswith("EvaluationPassed: ") for e in events), events


def test_an_evaluation_the_operator_never_finished_is_an_error_not_a_run_at_once(
        given: Given, when: When, then: Then, story: Story) -> None:
    # Given a healthy rollout with an evaluation set, and a release whose replies take 4 s each
    # (20 cases, 4 at a time: a run of about 20 s)
    evaluated("evkill", given, story)
    when.template_changes(version="v2", ttft_ms=4000)
    # When the operator is killed during the run (SIGKILL, as the kernel's OOM killer does)
    running = then.status(lambda s: s.get("evaluationRunning"), 120,
                          "an evaluation begun")["evaluationRunning"]
    assert running["revision"] == then.canary()
    when.operator_killed(down_for=1)
    # Then its successor records the run as an error instead of starting it again at once
    st = then.status(lambda s: (s.get("evaluation") or {}).get("verdict") == "Error", 60,
                     "the interrupted run recorded")
    ev = st["evaluation"]
    assert ev["message"].startswith("interrupted: the operator stopped while the evaluation "
                                    f"begun at {running['startedAt']} ran"), ev
    assert ev["consecutiveErrors"] == 1 and st["canaryWeight"] == 0
    # and the next run begins only after analysis.interval (5 s) from that error
    again = then.status(lambda s: s.get("evaluationRunning"), 60, "the next run begun")
    started = datetime.fromisoformat(again["evaluationRunning"]["startedAt"])
    assert started - datetime.fromisoformat(ev["measuredAt"]) >= timedelta(seconds=4.5), again
    events = story.release.events()
    assert any(e.startswith("EvaluationError: ") and "interrupted" in e for e in events), events
