"""Table and scenario tests of the step rules in :func:`inference_rollout.core.decide.decide`.

Each test drives a :class:`~tests.unit.coresim.Sim` (the handler's loop over a simulated world)
and checks the actions and the status the core produces.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from tests.unit.coresim import T0, Sim, manifest_spec, started

from inference_rollout.api import reasons as r
from inference_rollout.api.status import InferenceRolloutStatus, MetricResult
from inference_rollout.core.decide import analysis_due, decide, desired_route
from inference_rollout.core.revision import template_hash
from inference_rollout.core.timeutil import from_iso, to_iso
from inference_rollout.core.types import (
    Decision,
    DeleteRevision,
    EnsureRevision,
    OrphanRevision,
    RecordEvent,
    SetWeights,
)

#: Revisions as the status records them (ten hex characters of the template hash).
STABLE, CANARY = "aaaaaaaaaa", "bbbbbbbbbb"

M2 = "m2"


def body(**over: Any) -> dict[str, Any]:
    return manifest_spec(**over)


def analysis(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "interval": "10s", "prometheus": {"address": "http://prom:9090"},
        "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}],
    }
    out.update(over)
    return out


def steps(*spec: Any) -> dict[str, Any]:
    """``steps((5, "1m"), (20, "1m"), 100)``: weights with optional pauses."""
    out = []
    for s in spec:
        if isinstance(s, dict):
            out.append(s)
        elif isinstance(s, tuple):
            out.append({"weight": s[0], "pause": s[1]})
        else:
            out.append({"weight": s})
    return {"steps": out}


def kinds(d: Decision) -> list[str]:
    return [type(a).__name__ for a in d.actions]


def of(d: Decision, kind: type) -> list[Any]:
    return [a for a in d.actions if isinstance(a, kind)]


def events(d: Decision) -> list[str]:
    return [a.reason for a in of(d, RecordEvent)]


def writes(decisions: list[Decision]) -> list[int]:
    """Canary weights of every route write, in order."""
    return [a.canary_weight for d in decisions for a in of(d, SetWeights)]


def at_step(index: int, weight: int) -> Any:
    return lambda s: s.status.current_step == index and s.status.canary_weight == weight


def in_release(**over: Any) -> tuple[Sim, str, str]:
    """A rollout with its first revision Healthy, and a new template just applied."""
    sim = started(body(**over))
    old = sim.stable
    assert old is not None
    new = sim.release(M2)
    sim.decisions.clear()
    return sim, old, new


# --- first release ---------------------------------------------------------------------------


def test_first_revision_is_deployed_as_stable_with_all_traffic() -> None:
    sim = Sim(body())
    d = sim.reconcile(settle=False)
    rev = template_hash(sim.body["template"])
    assert d.actions[0] == SetWeights(rev, None, 0)
    assert EnsureRevision(rev, 4) in d.actions
    assert events(d) == [r.FIRST_RELEASE]
    assert (sim.stable, sim.canary, sim.status.phase) == (rev, None, "Progressing")
    assert sim.world.route == {rev: 100}
    d = sim.reconcile()  # pods become Ready
    d = sim.reconcile()
    assert d.actions == ()
    assert sim.status.phase == "Healthy"
    assert sim.status.message == f"revision {rev} serves all traffic"


# --- the happy path, promotion by relabelling ----------------------------------------------


def test_release_walks_the_steps_and_promotes_by_relabelling() -> None:
    sim, old, new = in_release(strategy=steps((5, "1m"), (20, "1m"), (50, "1m"), 100))
    d = sim.reconcile()
    assert events(d) == [r.NEW_RELEASE]
    assert d.actions[0] == SetWeights(old, new, 0)  # the canary joins the route at 0%
    assert EnsureRevision(new, 1) in d.actions
    assert (sim.canary, sim.status.current_step, sim.status.canary_weight) == (new, 0, 0)
    sim.run_until(lambda s: s.stable == new, limit=600)
    assert writes(sim.decisions) == [0, 5, 20, 50, 100, 0]
    promotion = sim.last
    assert events(promotion)[-2:] == [r.PROMOTED, r.RELEASE_COST]
    cost = promotion.status.release_cost
    assert cost is not None and (cost.revision, cost.outcome) == (new, "Promoted")
    # each step's weight in force (its hold starts) a 1m hold after the one before; then the
    # outcome (the last step, 100 %, holds nothing)
    reached = cost.steps_reached_after
    assert len(reached) == 4 and all(b - a >= 60 for a, b in itertools.pairwise(reached))
    assert cost.decided_after is not None and cost.decided_after >= reached[-1]
    assert cost.pods_started == 4  # the canary grew to the full count with its weight
    # surge pods from the first canary pod to the promotion: at least one, at most four
    assert cost.decided_after - 5 <= cost.pod_seconds <= 4 * cost.decided_after
    assert cost.canary_requests == 0  # no metric counts requests here (no analysis)
    assert promotion.actions[0] == SetWeights(new, None, 0)
    assert sim.world.route == {new: 100}
    # relabelled, never copied: no Deployment is created or resized for the promotion, and the
    # old stable keeps its pods until scaleDownDelay (30s) has passed
    assert of(promotion, EnsureRevision) == [] and of(promotion, DeleteRevision) == []
    assert sim.status.old_revisions == {old: to_iso(sim.now + timedelta(seconds=30))}
    assert sim.world.deployments[old].desired == 4
    assert sim.status.phase == "Healthy"
    promoted_at = sim.now
    sim.run(29)
    assert old in sim.world.deployments
    sim.run(2)
    assert old not in sim.world.deployments
    deleting = [d for d in sim.decisions if of(d, DeleteRevision)]
    assert len(deleting) == 1 and of(deleting[0], DeleteRevision) == [DeleteRevision(old)]
    assert sim.status.old_revisions == {}
    # only the two revisions were ever touched: the canary's Deployment became the stable one
    touched = {a.revision for d in sim.decisions for a in of(d, EnsureRevision)}
    assert touched == {new}
    assert sim.now - promoted_at >= timedelta(seconds=30)


def test_every_step_holds_for_its_pause_and_is_analysed_at_its_weight() -> None:
    pauses = {0: 60.0, 1: 120.0, 2: 0.0}
    sim, _, new = in_release(strategy=steps((5, "1m"), (20, "2m"), 100))
    sim.run_until(lambda s: s.stable == new, limit=900)
    completed = 0
    for before, d in zip(sim.decisions, sim.decisions[1:], strict=False):
        if r.STEP_COMPLETE not in events(d):
            continue
        completed += 1
        step = before.status.current_step
        assert step is not None and before.status.step_started_at is not None
        held_from = from_iso(before.status.step_started_at)
        assert held_from is not None
        measured = from_iso(d.status.analysis["errors"].measured_at)
        assert measured is not None and d.status.analysis["errors"].verdict == "Pass"
        assert measured >= held_from + timedelta(seconds=pauses[step])
        assert measured > held_from
        assert sim.now >= held_from
    assert completed == 3
    gaps = [(b - a).total_seconds() for a, b in zip(sim.measured, sim.measured[1:], strict=False)]
    assert min(gaps) >= 1  # never measured twice at one instant


@pytest.mark.parametrize("pause", [None, "0s"])
def test_a_step_without_hold_still_needs_a_measurement_at_its_own_weight(pause: Any) -> None:
    """A measurement taken at the instant a weight is set saw the previous weight; it must not
    complete the new step (regression: a zero-pause step after an analysed step, and the final
    100% step, were passed on the previous step's verdict)."""
    second = {"weight": 25} if pause is None else {"weight": 25, "pause": pause}
    sim, _, new = in_release(strategy=steps((20, "30s"), second, 100))
    sim.run_until(at_step(1, 25), limit=300)
    raised = sim.now
    sim.run_until(lambda s: s.status.current_step != 1, limit=300)
    assert any(t > raised for t in sim.measured), "step 2 completed without being measured"
    sim.run_until(lambda s: s.stable == new, limit=300)
    at_100 = next(d for d in sim.decisions if d.status.canary_weight == 100)
    assert at_100.status.step_started_at is not None
    # the promoting verdict was measured after the weight reached 100
    promoted = sim.last.status
    assert promoted.stable_revision == new
    assert sim.measured[-1] > T0 and to_iso(sim.measured[-1]) > at_100.status.step_started_at


def test_hold_is_measured_from_when_the_weight_was_reached_not_when_the_step_began() -> None:
    sim, _, _ = in_release(strategy=steps((50, "1m"), 100))
    sim.world.auto_ready = False
    sim.run(40)  # 40 s waiting for the two canary pods
    assert sim.status.canary_weight == 0
    assert "0% → 50% (waiting for canary pods)" in sim.status.message
    sim.world.auto_ready = True
    sim.run_until(at_step(0, 50))
    raised = sim.now
    sim.run_until(lambda s: s.status.current_step == 1, limit=300)
    assert sim.now - raised >= timedelta(minutes=1)


# --- never route to what cannot serve --------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "weight", "needed"), [(4, 5, 1), (4, 50, 2), (4, 51, 3), (8, 20, 2), (3, 100, 3)])
def test_weight_is_raised_only_when_enough_canary_pods_are_ready(
        replicas: int, weight: int, needed: int) -> None:
    sim, _, new = in_release(replicas=replicas, strategy=steps((weight, "1m"), 100)
                             if weight < 100 else steps(100))
    sim.world.auto_ready = False
    sim.reconcile()
    assert sim.world.deployments[new].desired == needed
    for ready in range(needed):
        sim.world.set_ready(new, ready)
        sim.advance(2)
        d = sim.reconcile()
        assert sim.status.canary_weight == 0 and writes([d]) == []
    sim.world.set_ready(new, needed)
    sim.advance(2)
    d = sim.reconcile()
    assert sim.status.canary_weight == weight
    assert d.actions[0] == SetWeights(sim.stable or "", new, weight)
    assert events(d) == [r.STEP_WEIGHT_SET]


def test_overdrive_step_replicas_carry_a_larger_share_on_purpose() -> None:
    sim, _, new = in_release(strategy=steps({"weight": 50, "pause": "1m", "replicas": 1}, 100))
    sim.world.auto_ready = False
    sim.reconcile()
    assert sim.world.deployments[new].desired == 1
    sim.world.set_ready(new, 1)
    sim.advance(2)
    sim.reconcile()
    assert sim.status.canary_weight == 50  # one pod of four carries half: the user asked for it


def test_progress_deadline_rolls_back_with_the_unschedulable_message() -> None:
    sim, old, new = in_release(strategy={**steps((5, "1m"), 100), "progressDeadline": "2m"})
    sim.world.unschedulable_above = 0  # no free GPU anywhere
    sim.run(119)
    assert not sim.status.aborted and sim.status.canary_weight == 0
    sim.run(2)
    st = sim.status
    assert st.aborted and st.abort_reason == r.PROGRESS_DEADLINE
    assert st.message == ("rolled back: canary had 0/1 ready pods after 2m "
                          "(1 pods unschedulable: not enough GPUs)")
    assert st.phase == "Degraded"
    assert sim.world.route == {old: 100, new: 0}


def test_progress_deadline_without_unschedulable_pods() -> None:
    sim, _, new = in_release(strategy={**steps((50, "1m"), 100), "progressDeadline": "1m"})
    sim.world.auto_ready = False
    sim.reconcile()
    sim.world.set_ready(new, 1)
    sim.run(61)
    assert sim.status.message == "rolled back: canary had 1/2 ready pods after 1m"


def test_progress_deadline_counts_from_the_step_not_the_release() -> None:
    sim, _, new = in_release(strategy={**steps((5, "1m"), (50, "1m"), 100),
                                       "progressDeadline": "90s"})
    sim.run_until(at_step(0, 5))
    sim.world.auto_ready = False  # the second canary pod takes a while to load the model
    sim.run_until(lambda s: s.status.current_step == 1, limit=300)
    sim.run(80)
    assert not sim.status.aborted
    sim.world.set_ready(new, 2)
    sim.world.auto_ready = True
    sim.run_until(at_step(1, 50))
    assert not sim.status.aborted


@pytest.mark.parametrize("delay", ["0s", "45s"])
def test_a_deadline_abort_never_creates_a_canary_that_is_gone(delay: str) -> None:
    """The canary's Deployment was deleted (by hand, or never created before a crash) and the
    deadline has passed: the step would recreate it, the abort must not (hypothesis found it)."""
    sim, old, new = in_release(strategy={**steps((5, "1m"), 100), "progressDeadline": "20s",
                                         "abortScaleDownDelay": delay})
    sim.world.auto_ready = False
    sim.reconcile()
    sim.advance(25)
    del sim.world.deployments[new]
    d = sim.reconcile()
    assert sim.status.aborted and sim.status.abort_reason == r.PROGRESS_DEADLINE
    assert [a for a in of(d, EnsureRevision) if a.revision == new] == []
    assert new not in sim.world.deployments and sim.world.route == {old: 100, new: 0}


# --- analysis rules in the loop ----------------------------------------------------------------


def test_a_failed_verdict_rolls_back_in_one_write_before_any_scaling() -> None:
    sim, old, new = in_release(strategy={**steps((5, "1m"), (20, "1m"), 100),
                                         "abortScaleDownDelay": "45s"})
    sim.run_until(at_step(1, 20), limit=300)
    sim.advance(10)
    sim.verdicts = "fail"
    d = sim.reconcile()
    st = sim.status
    assert st.aborted and st.abort_reason == r.ANALYSIS_FAILED
    assert st.message == "rolled back: errors 1.02 (Fail: ≤ 0.01)"
    assert [a for a in d.actions if isinstance(a, SetWeights)] == [SetWeights(old, new, 0)]
    assert isinstance(d.actions[0], SetWeights)
    assert sim.world.route == {old: 100, new: 0} and st.canary_weight == 0
    assert events(d) == [r.VERDICT_CHANGED, r.ANALYSIS_FAILED, r.RELEASE_COST]
    assert of(d, RecordEvent)[1].type == "Warning"
    # the canary keeps its pods for abortScaleDownDelay, then scales to zero (kept for a retry)
    sim.verdicts = "pass"
    sim.run(44)
    assert sim.world.deployments[new].desired == 1
    sim.run(2)
    assert sim.world.deployments[new].desired == 0
    scaled = [d for d in sim.decisions if EnsureRevision(new, 0) in d.actions]
    assert len(scaled) == 1
    assert new in sim.world.deployments and sim.status.old_revisions == {}
    # and it stays rolled back
    sim.run(600)
    assert sim.status.aborted and sim.status.canary_weight == 0
    assert sim.status.phase == "Degraded"
    assert sim.world.route == {old: 100, new: 0}


@pytest.mark.parametrize(
    ("failure_limit", "sequence", "rolled_back_after"),
    [
        (0, ["fail"], 1),
        (1, ["fail", "fail"], 2),
        (1, ["fail", "pass", "fail", "pass"], None),
        (1, ["fail", "error", "fail"], None),  # an error breaks the run of failures
        (2, ["fail", "fail", "fail"], 3),
        (2, ["fail", "inconclusive", "fail", "fail", "fail"], 5),  # inconclusive breaks it too
    ],
)
def test_failure_limit_in_the_loop(failure_limit: int, sequence: list[str],
                                   rolled_back_after: int | None) -> None:
    sim, _, _ = in_release(analysis=analysis(failureLimit=failure_limit),
                           strategy=steps((5, "1h"), 100))
    sim.run_until(at_step(0, 5))
    for i, kind in enumerate(sequence, start=1):
        sim.advance(10)
        sim.verdicts = kind
        sim.reconcile()
        assert sim.status.aborted == (rolled_back_after is not None and i >= rolled_back_after)
        assert sim.status.canary_weight == (0 if sim.status.aborted else 5)


def test_a_tolerated_failure_holds_the_weight_until_a_pass() -> None:
    """failureLimit tolerates a failed measurement; it never lets more traffic onto a canary
    whose latest verdict is Fail (regression: the next step's weight was raised as soon as its
    pods were Ready)."""
    sim, _, new = in_release(analysis=analysis(failureLimit=1),
                             strategy=steps((5, "30s"), (50, "1m"), 100))
    sim.run_until(at_step(0, 5))
    sim.world.auto_ready = False
    sim.run_until(lambda s: s.status.current_step == 1, limit=300)
    assert sim.status.canary_weight == 5
    sim.advance(10)
    sim.verdicts = "fail"
    sim.reconcile()
    assert not sim.status.aborted and sim.status.canary_weight == 5
    sim.world.set_ready(new, 2)
    sim.advance(2)
    d = sim.reconcile()
    assert sim.status.canary_weight == 5 and writes([d]) == []
    sim.verdicts = "pass"
    sim.world.auto_ready = True
    sim.run_until(at_step(1, 50), limit=60)


@pytest.mark.parametrize("kind", ["error", "inconclusive"])
def test_errors_and_too_few_samples_never_promote(kind: str) -> None:
    sim, _, _ = in_release(analysis=analysis(consecutiveErrorLimit=1000),
                           strategy=steps((5, "1m"), 100))
    sim.verdicts = kind
    sim.run(600)
    st = sim.status
    assert (st.current_step, st.canary_weight, st.aborted, st.paused_reason) == (0, 5, False, None)
    assert st.analysis["errors"].verdict == ("Error" if kind == "error" else "Inconclusive")
    sim.verdicts = "pass"
    sim.run_until(at_step(1, 100), limit=60)


def test_inconclusive_does_not_count_toward_the_error_limit() -> None:
    sim, _, _ = in_release(analysis=analysis(consecutiveErrorLimit=2),
                           strategy=steps((5, "1h"), 100))
    sim.verdicts = "inconclusive"
    sim.run(300)
    assert sim.status.paused_reason is None and not sim.status.aborted


def test_error_limit_pause_blocks_promotion_until_resume_clears_it() -> None:
    sim, _, _ = in_release(analysis=analysis(consecutiveErrorLimit=3),
                           strategy=steps((5, "30s"), 100))
    sim.run_until(at_step(0, 5))
    sim.verdicts = "error"
    sim.run_until(lambda s: s.status.paused_reason is not None, limit=60)
    st = sim.status
    assert st.paused_reason == r.ERROR_LIMIT and st.phase == "Paused"
    assert st.analysis["errors"].consecutive_errors == 3
    assert r.ERROR_LIMIT in events(sim.last)
    assert st.message.startswith("paused (AnalysisErrorLimit); step 1/2: 5% for ")
    paused = next(c for c in st.conditions if c.type == "Paused")
    assert paused.status == "True" and paused.message.startswith(
        "paused (AnalysisErrorLimit)")
    # Prometheus recovers, but a pause is a pause: no promotion, no more traffic
    sim.verdicts = "pass"
    sim.run(300)
    assert (sim.status.current_step, sim.status.canary_weight) == (0, 5)
    assert sim.status.paused_reason == r.ERROR_LIMIT
    assert sum(r.ERROR_LIMIT in events(d) for d in sim.decisions) == 1
    d = sim.reconcile(resume=True)
    assert sim.status.paused_reason is None and not sim.status.requests.resume
    assert sim.status.analysis["errors"].consecutive_errors == 0
    assert sim.status.phase == "Progressing"
    assert d.status.requests.resume is False
    sim.run_until(lambda s: s.status.current_step == 1, limit=60)


def test_resume_clears_the_error_count_so_the_limit_counts_afresh() -> None:
    sim, _, _ = in_release(analysis=analysis(consecutiveErrorLimit=2),
                           strategy=steps((5, "1h"), 100))
    sim.run_until(at_step(0, 5))
    sim.verdicts = "error"
    sim.run_until(lambda s: s.status.paused_reason is not None, limit=60)
    sim.reconcile(resume=True, measure=False)
    sim.advance(10)
    sim.reconcile()
    assert sim.status.paused_reason is None
    assert sim.status.analysis["errors"].consecutive_errors == 1
    sim.advance(10)
    sim.reconcile()
    assert sim.status.paused_reason == r.ERROR_LIMIT


def test_error_limit_abort_rolls_back() -> None:
    sim, old, new = in_release(analysis=analysis(consecutiveErrorLimit=2, onErrorLimit="Abort"),
                               strategy=steps((5, "1h"), 100))
    sim.run_until(at_step(0, 5))
    sim.verdicts = "error"
    sim.run_until(lambda s: s.status.aborted, limit=60)
    st = sim.status
    assert st.abort_reason == r.ERROR_LIMIT and st.canary_weight == 0
    # The message says what failed to measure, not only that it did.
    assert st.message == ("rolled back: errors n/a (Error: ≤ 0.01; Unreachable: connection "
                          "refused) failed to measure 2 times in a row")
    assert sim.world.route == {old: 100, new: 0}
    assert sim.status.phase == "Degraded"


def test_analysis_runs_while_paused_and_a_failure_still_rolls_back() -> None:
    sim, _, _ = in_release(strategy=steps((5, "1h"), 100))
    sim.run_until(at_step(0, 5))
    sim.reconcile(pause=True)
    assert sim.status.paused_reason == r.PAUSE_REQUESTED
    sim.verdicts = "fail"
    sim.run(30)
    assert sim.status.aborted and sim.status.canary_weight == 0
    assert sim.status.paused_reason is None


def test_relative_metric_compares_canary_with_stable() -> None:
    sim, _, _ = in_release(
        analysis=analysis(metrics=[{"name": "conversion", "query": "q{{revision}}",
                                    "minRatioToStable": 0.95}]),
        strategy=steps((5, "1h"), 100))
    sim.run_until(lambda s: "conversion" in s.status.analysis)
    res = sim.status.analysis["conversion"]
    assert (res.verdict, res.stable_value, res.threshold) == ("Pass", 1.0, "≥ 0.95× stable")
    sim.verdicts = "fail"
    sim.run(11)
    assert sim.status.aborted
    assert sim.status.message == "rolled back: conversion 0.475 (Fail: ≥ 0.95× stable)"


def test_slo_breach_rolls_back() -> None:
    sim, _, _ = in_release(analysis=analysis(metrics=[], slo={"ttftP99": "300ms"}),
                           strategy=steps((5, "1h"), 100))
    sim.run_until(lambda s: "slo-ttft-p99" in s.status.analysis)
    assert sim.status.analysis["slo-ttft-p99"].threshold == "≤ 0.45"
    sim.verdicts = {"slo-ttft-p99": "fail"}
    sim.run(11)
    assert sim.status.aborted
    assert sim.status.message == "rolled back: slo-ttft-p99 1.9 (Fail: ≤ 0.45)"


def test_every_effective_metric_must_pass() -> None:
    sim, _, _ = in_release(analysis=analysis(slo={"ttftP99": "300ms"}),
                           strategy=steps((5, "30s"), 100))
    sim.verdicts = {"slo-ttft-p99": "inconclusive"}
    sim.run(300)
    assert sim.status.current_step == 0
    assert sim.status.analysis["errors"].verdict == "Pass"
    sim.verdicts = "pass"
    sim.run_until(lambda s: s.status.current_step == 1, limit=60)


def test_without_metrics_a_step_advances_after_its_hold() -> None:
    sim, _, new = in_release(analysis={"interval": "10s"}, strategy=steps((5, "1m"), 100))
    sim.run_until(at_step(0, 5))
    raised = sim.now
    sim.run_until(lambda s: s.status.current_step == 1, limit=300)
    assert sim.now - raised == timedelta(minutes=1)
    assert sim.measured == []
    sim.run_until(lambda s: s.stable == new, limit=60)


# --- requests ------------------------------------------------------------------------------------


def test_manual_step_waits_for_promote() -> None:
    sim, _, new = in_release(strategy=steps({"weight": 10, "pause": "30s", "manual": True}, 100))
    sim.run_until(lambda s: s.status.paused_reason is not None, limit=300)
    st = sim.status
    assert (st.paused_reason, st.phase, st.current_step, st.canary_weight) == (
        r.MANUAL_STEP, "Paused", 0, 10)
    assert st.message == "step 1/2 held; promote to continue"
    sim.run(3600)
    assert (sim.status.current_step, sim.status.canary_weight) == (0, 10)
    sim.reconcile(resume=True)  # resume is not promote: the step stays held
    sim.run(60)
    assert sim.status.paused_reason == r.MANUAL_STEP
    d = sim.reconcile(promote=True)
    assert r.STEP_COMPLETE in events(d)
    assert sim.status.current_step == 1 and sim.status.paused_reason is None
    assert not sim.status.requests.promote
    sim.run_until(lambda s: s.stable == new, limit=60)


def test_a_manual_step_still_needs_its_hold_and_analysis_before_it_waits() -> None:
    sim, _, _ = in_release(strategy=steps({"weight": 10, "pause": "1m", "manual": True}, 100))
    sim.verdicts = "error"
    sim.run(120)
    assert sim.status.paused_reason != r.MANUAL_STEP


def test_promote_skips_the_hold() -> None:
    sim, _, _ = in_release(strategy=steps((5, "24h"), (20, "24h"), 100))
    sim.run_until(at_step(0, 5))
    sim.advance(10)
    d = sim.reconcile(promote=True)
    st = sim.status
    assert (st.current_step, st.canary_weight, st.requests.promote) == (1, 20, False)
    assert events(d)[-2:] == [r.STEP_COMPLETE, r.STEP_WEIGHT_SET]
    sim.run(600)
    assert (sim.status.current_step, sim.status.canary_weight) == (1, 20)  # one step only


def test_promote_waits_for_the_weight_in_place() -> None:
    sim, _, new = in_release(strategy=steps((50, "24h"), 100))
    sim.world.auto_ready = False
    sim.reconcile()
    sim.reconcile(promote=True)
    assert sim.status.current_step == 0 and sim.status.requests.promote  # kept until it acts
    sim.world.set_ready(new, 2)
    sim.advance(2)
    sim.reconcile()
    assert (sim.status.current_step, sim.status.canary_weight) == (0, 50)
    sim.advance(2)
    sim.reconcile()
    assert sim.status.current_step == 1 and not sim.status.requests.promote


def test_promote_full_goes_to_100_and_promotes() -> None:
    sim, old, new = in_release(strategy=steps((5, "24h"), (20, "24h"), (50, "24h"), 100))
    sim.run_until(at_step(0, 5))
    sim.world.auto_ready = False
    sim.advance(5)
    sim.reconcile(promote_full=True)
    st = sim.status
    assert st.current_step == 3 and st.canary_weight == 5 and st.requests.promote_full
    assert sim.world.deployments[new].desired == 4
    sim.world.auto_ready = True
    sim.run_until(lambda s: s.stable == new, limit=60)
    assert writes(sim.decisions) == [0, 5, 100, 0]
    assert sim.world.route == {new: 100}
    assert not sim.status.requests.promote_full
    assert old in sim.status.old_revisions


def test_abort_request_rolls_back_and_scales_the_canary_down_after_the_delay() -> None:
    sim, old, new = in_release(strategy={**steps((50, "1h"), 100), "abortScaleDownDelay": "30s"})
    sim.run_until(at_step(0, 50))
    sim.advance(10)
    d = sim.reconcile(abort=True)
    assert isinstance(d.actions[0], SetWeights)
    assert of(d, SetWeights) == [SetWeights(old, new, 0)]
    assert of(d, EnsureRevision) == []
    st = sim.status
    assert (st.aborted, st.abort_reason, st.message) == (
        True, r.ABORT_REQUESTED, "rolled back on request")
    assert not st.requests.abort and st.phase == "Degraded"
    aborted = next(c for c in st.conditions if c.type == "Aborted")
    assert (aborted.status, aborted.reason) == ("True", r.ABORT_REQUESTED)
    progressing = next(c for c in st.conditions if c.type == "Progressing")
    assert progressing.status == "False"
    sim.run(29)
    assert sim.world.deployments[new].desired == 2
    sim.run(2)
    assert sim.world.deployments[new].desired == 0
    assert sim.status.message == "rolled back on request"


def test_retry_starts_again_at_step_1() -> None:
    sim, _, new = in_release(strategy=steps((5, "30s"), (20, "30s"), 100))
    sim.run_until(at_step(1, 20), limit=300)
    sim.reconcile(abort=True)
    sim.run(120)
    assert sim.world.deployments[new].desired == 0
    d = sim.reconcile(retry=True, settle=False)
    st = sim.status
    assert events(d)[0] == r.RETRY_REQUESTED
    assert (st.aborted, st.current_step, st.canary_weight, st.analysis) == (False, 0, 0, {})
    assert not st.requests.retry and st.phase == "Progressing"
    assert EnsureRevision(new, 1) in d.actions
    sim.run_until(lambda s: s.stable == new, limit=300)
    after_retry = sim.decisions[sim.decisions.index(d):]
    assert writes(after_retry) == [5, 20, 100, 0]


def test_retry_without_abort_is_ignored_and_cleared() -> None:
    sim, _, _ = in_release(strategy=steps((5, "1h"), 100))
    sim.run_until(at_step(0, 5))
    sim.reconcile(retry=True)
    assert (sim.status.current_step, sim.status.canary_weight) == (0, 5)


def test_pause_and_resume_requests() -> None:
    sim, _, new = in_release(strategy=steps((5, "30s"), (50, "30s"), 100))
    sim.run_until(at_step(0, 5))
    sim.reconcile(pause=True)
    st = sim.status
    assert (st.paused_reason, st.phase, st.requests.pause) == (r.PAUSE_REQUESTED, "Paused", False)
    sim.run(600)
    assert sim.status.canary_weight == 5
    assert sim.status.message.startswith("paused (PauseRequested); step 1/3: 5% for ")
    sim.reconcile(resume=True)
    assert sim.status.paused_reason is None
    sim.run_until(lambda s: s.stable == new, limit=300)


def test_a_pause_requested_before_the_release_holds_its_first_weight() -> None:
    sim = started(body(strategy=steps((5, "30s"), 100)))
    new = sim.release(M2)
    sim.status.requests.pause = True
    sim.run(120)
    assert sim.canary == new and sim.status.canary_weight == 0
    assert sim.status.paused_reason == r.PAUSE_REQUESTED


def test_requests_at_stable_are_cleared() -> None:
    sim = started()
    sim.reconcile(abort=True, promote=True, retry=True, pause=True)
    assert sim.status.requests.model_dump() == {k: False for k in sim.status.requests.model_dump()}
    assert sim.status.phase == "Healthy"


# --- template changes, reverts, invalid releases, deletion ------------------------------------


def test_template_change_mid_release_abandons_the_old_canary_and_starts_over() -> None:
    sim, old, mid = in_release(strategy={**steps((5, "30s"), (20, "30s"), 100),
                                         "abortScaleDownDelay": "20s"})
    sim.run_until(at_step(1, 20), limit=300)
    sim.advance(3)
    newer = sim.release("m3")
    d = sim.reconcile()
    assert events(d) == [r.TEMPLATE_CHANGED, r.NEW_RELEASE, r.RELEASE_COST]
    cost = d.status.release_cost
    assert cost is not None and (cost.revision, cost.outcome) == (newer, None)  # the new one's
    assert d.actions[0] == SetWeights(old, newer, 0)
    assert len(of(d, SetWeights)) == 1
    assert sim.world.route == {old: 100, newer: 0}
    st = sim.status
    assert (st.canary_revision, st.current_step, st.canary_weight, st.analysis) == (
        newer, 0, 0, {})
    assert st.old_revisions == {mid: to_iso(sim.now + timedelta(seconds=20))}
    assert DeleteRevision(mid) not in d.actions
    sim.run(19)
    assert mid in sim.world.deployments
    sim.run(2)
    assert mid not in sim.world.deployments
    sim.run_until(lambda s: s.stable == newer, limit=300)
    assert writes(sim.decisions[sim.decisions.index(d):]) == [0, 5, 20, 100, 0]


def test_template_change_ignores_a_measurement_of_the_abandoned_canary() -> None:
    """The handler measured the old canary (its status said so); that verdict belongs to the
    abandoned release, not to the new one (regression: it rolled the new release back)."""
    sim, _, _ = in_release(strategy=steps((5, "30s"), (20, "1h"), 100))
    sim.run_until(at_step(1, 20), limit=300)
    sim.advance(10)
    newer = sim.release("m3")
    sim.verdicts = "fail"
    assert analysis_due(sim.spec, sim.status, sim.now)
    sim.reconcile()
    st = sim.status
    assert (st.canary_revision, st.aborted, st.analysis) == (newer, False, {})
    assert st.last_analysis_at is None


def test_revert_to_the_stable_template_ends_the_release() -> None:
    sim = started(body(strategy={**steps((5, "30s"), (20, "30s"), 100),
                                 "abortScaleDownDelay": "10s"}))
    old = sim.stable
    assert old is not None
    original = sim.body
    sim.release(M2)
    sim.run_until(at_step(1, 20), limit=300)
    sim.body = original
    sim.generation += 1
    d = sim.reconcile()
    assert d.actions[0] == SetWeights(old, None, 0)
    assert sim.world.route == {old: 100}
    st = sim.status
    assert (st.stable_revision, st.canary_revision, st.current_step, st.canary_weight) == (
        old, None, None, 0)
    assert st.phase == "Healthy" and st.message == f"revision {old} serves all traffic"
    assert st.observed_generation == sim.generation
    sim.run(11)
    assert set(sim.world.deployments) == {old}


def test_revert_after_a_rollback_clears_the_abort() -> None:
    sim = started(body(strategy=steps((5, "30s"), 100)))
    original = sim.body
    sim.release(M2)
    sim.run_until(at_step(0, 5))
    d = sim.reconcile(abort=True)
    assert d.status.phase == "Degraded"
    sim.body = original
    d = sim.reconcile()
    assert not d.status.aborted and d.status.phase == "Healthy"


def test_deletion_returns_traffic_to_stable() -> None:
    sim, old, new = in_release(strategy=steps((50, "1h"), 100))
    sim.run_until(at_step(0, 50))
    d = sim.reconcile(deleting=True)
    (write,) = of(d, SetWeights)
    assert d.actions[0] == write and (write.stable_revision, write.canary_weight) == (old, 0)
    assert of(d, EnsureRevision) == [] and of(d, DeleteRevision) == []
    assert events(d) == [r.DELETING]
    assert sim.world.route is not None
    assert sim.world.route[old] == 100 and sim.world.route.get(new, 0) == 0
    # The canary's pods stay abortScaleDownDelay (30s) for the gateway to follow the route:
    # the rollout, and so its revisions, is held that long.
    assert new in d.status.old_revisions and d.deletion_hold == 30
    sim.advance(10)
    d = sim.reconcile(deleting=True)
    # Idempotent, so the finalizer can be retried: only the stable's orphaning (the user's route
    # keeps pointing at it; a merge patch that changes nothing the second time) is repeated.
    assert d.actions == (OrphanRevision(old),)
    assert d.deletion_hold == 20
    sim.advance(20)
    d = sim.reconcile(deleting=True)
    assert d.deletion_hold == 0 and d.actions == (OrphanRevision(old),)


def test_a_deletion_waits_for_draining_revisions_at_most_30s() -> None:
    """An hour-long abortScaleDownDelay (a failed canary kept for forensics) must not hold a
    `kubectl delete` for an hour: the gateway needs seconds."""
    sim, _old, new = in_release(strategy={**steps((50, "1h"), 100),
                                          "abortScaleDownDelay": "1h"})
    sim.run_until(at_step(0, 50))
    asked = sim.now
    d = sim.reconcile(deleting=True, deleting_since=asked)
    assert new in d.status.old_revisions and d.deletion_hold == 30
    sim.advance(30)
    assert sim.reconcile(deleting=True, deleting_since=asked).deletion_hold == 0


def test_deletion_with_an_owned_route_is_not_held() -> None:
    """The route goes with the rollout: nothing is left to send the canary anything."""
    sim, _old, new = in_release(traffic={"gatewayAPI": {"parentRefs": [{"name": "gw"}]}},
                                strategy=steps((50, "1h"), 100))
    sim.run_until(at_step(0, 50))
    d = sim.reconcile(deleting=True)
    assert new in d.status.old_revisions and d.deletion_hold == 0


def test_deletion_at_stable_keeps_the_route() -> None:
    sim = started()
    d = sim.reconcile(deleting=True)
    assert d.actions == (OrphanRevision(sim.stable or ""),)


def test_deletion_with_an_owned_route_orphans_nothing() -> None:
    sim = started(manifest_spec(traffic={"gatewayAPI": {"parentRefs": [{"name": "gw"}]}}))
    d = sim.reconcile(deleting=True)
    assert d.actions == ()


def test_deletion_after_the_route_is_gone_writes_nothing() -> None:
    """A GitOps prune that removed the user's route first: nothing carries traffic, so the
    finalizer must not wait for a route write (issue 9, item 6)."""
    sim, _old, _new = in_release(strategy=steps((50, "1h"), 100))
    sim.run_until(at_step(0, 50))
    sim.world.route = None
    d = sim.reconcile(deleting=True)
    assert d.actions == ()


def test_invalid_release_never_receives_traffic() -> None:
    sim, old, new = in_release(strategy=steps((5, "30s"), 100))
    problems = ("spec.template: --max-model-len 131072 does not fit the KV pool",)
    sim.run(300, invalid=problems)
    assert all(a.canary_weight == 0 for d in sim.decisions for a in of(d, SetWeights))
    assert all(a.revision != new for d in sim.decisions for a in of(d, EnsureRevision))
    st = sim.status
    assert st.canary_revision is None and st.phase == "Degraded"
    valid = next(c for c in st.conditions if c.type == "Valid")
    assert (valid.status, valid.reason) == ("False", r.INVALID_SPEC)
    assert valid.message == st.message == (
        "the release will not receive traffic until fixed: " + problems[0])
    assert sim.world.route == {old: 100}
    # fixed: the release proceeds
    sim.run_until(lambda s: s.stable == new, limit=300)
    valid = next(c for c in sim.status.conditions if c.type == "Valid")
    assert valid.status == "True"


def test_a_release_turning_invalid_mid_way_loses_its_traffic() -> None:
    sim, old, new = in_release(strategy={**steps((20, "1h"), 100), "abortScaleDownDelay": "5s"})
    sim.run_until(at_step(0, 20))
    d = sim.reconcile(invalid=("bad",))
    assert d.actions[0] == SetWeights(old, None, 0)
    assert sim.world.route == {old: 100}
    assert sim.status.old_revisions == {new: to_iso(sim.now + timedelta(seconds=5))}
    sim.run(6, invalid=("bad",))
    assert new not in sim.world.deployments


def test_an_invalid_first_revision_deploys_nothing() -> None:
    sim = Sim(body())
    d = sim.reconcile(invalid=("bad",))
    assert [(e.type, e.reason) for e in of(d, RecordEvent)] == [("Warning", r.INVALID_SPEC)]
    assert len(d.actions) == 1 and sim.status.stable_revision is None
    assert sim.status.phase == "Degraded"
    assert sim.reconcile(invalid=("bad",)).actions == ()  # one Event, not one per reconcile


# --- the route and the revisions, always ----------------------------------------------------


def test_a_drifted_route_is_put_back() -> None:
    sim, old, new = in_release(strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    sim.world.route = {old: 50, new: 50}  # someone edited the HTTPRoute (or git synced it)
    d = sim.reconcile()
    assert d.actions[0] == SetWeights(old, new, 20)
    assert sim.world.route == {old: 80, new: 20}


def test_an_orphan_revision_is_adopted_and_removed_after_the_delay() -> None:
    sim = started(body(strategy={**steps(100), "scaleDownDelay": "1m"}))
    sim.world.deployments["deadbeef00"] = sim.world.deployments[sim.stable or ""]
    sim.reconcile()
    assert "deadbeef00" in sim.status.old_revisions
    sim.run(59)
    assert "deadbeef00" in sim.world.deployments
    sim.run(31)
    assert "deadbeef00" not in sim.world.deployments


def test_desired_route() -> None:
    st = InferenceRolloutStatus(stable_revision=STABLE, canary_revision=CANARY, canary_weight=20)
    assert desired_route(st) == {STABLE: 80, CANARY: 20}
    assert desired_route(InferenceRolloutStatus(stable_revision=STABLE)) == {STABLE: 100}
    assert desired_route(InferenceRolloutStatus()) == {}


# --- swap mode ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_surge", [1, 2])
def test_swap_release_stays_within_quota_and_promotes(max_surge: int) -> None:
    sim, _, new = in_release(capacity={"mode": "swap", "maxSurge": max_surge},
                               strategy=steps((25, "30s"), (50, "30s"), 100))
    sim.run_until(lambda s: s.stable == new, limit=600)
    sim.run(60)
    assert set(sim.world.deployments) == {new}
    assert sim.world.deployments[new].desired == 4
    assert writes(sim.decisions) == [0, 25, 50, 100, 0]


def test_swap_rollback_regrows_stable_as_the_canary_goes() -> None:
    sim, old, new = in_release(capacity={"mode": "swap", "maxSurge": 1},
                               strategy={**steps((50, "1h"), 100), "abortScaleDownDelay": "30s"})
    sim.run_until(at_step(0, 50))
    assert sim.world.deployments[old].desired == 2
    sim.reconcile(abort=True)
    assert sim.world.deployments[old].desired == 3  # quota 5 minus the canary's 2 pods
    sim.run(31)
    assert sim.world.deployments[new].desired == 0
    assert sim.world.deployments[old].desired == 4


def test_swap_template_change_counts_the_abandoned_canary_against_the_quota() -> None:
    """The abandoned canary keeps its GPUs until it is deleted: neither the stable's regrowth nor
    the new canary may push the fleet over replicas + maxSurge."""
    sim, _, mid = in_release(capacity={"mode": "swap", "maxSurge": 1},
                             strategy={**steps((50, "1h"), 100), "abortScaleDownDelay": "30s"})
    sim.run_until(at_step(0, 50))
    sim.release("m3")
    for _ in range(40):
        sim.reconcile()
        assert sum(d.desired for d in sim.world.deployments.values()) <= 5, sim.world.deployments
        sim.advance(2)
    assert mid not in sim.world.deployments
    assert sim.status.canary_weight == 50


def test_analysis_due() -> None:
    spec = __import__("inference_rollout.api.spec", fromlist=["x"]).InferenceRolloutSpec.parse(
        body(strategy=steps((5, "1m"), 100)))
    t = T0

    def st(**kw: Any) -> InferenceRolloutStatus:
        base: dict[str, Any] = {"stable_revision": STABLE, "canary_revision": CANARY,
                                "current_step": 0, "canary_weight": 5,
                                "step_started_at": to_iso(t)}
        base.update(kw)
        return InferenceRolloutStatus(**base)

    def at(seconds: float) -> Any:
        return t + timedelta(seconds=seconds)

    assert not analysis_due(spec, st(canary_weight=0), at(5))
    assert not analysis_due(spec, st(canary_revision=None, canary_weight=0), at(5))
    assert not analysis_due(spec, st(aborted=True), at(5))
    assert analysis_due(spec, st(), at(0))  # first measurement
    assert analysis_due(spec, st(last_analysis_at=to_iso(at(0))), at(0.5))  # taken before the raise
    assert not analysis_due(spec, st(last_analysis_at=to_iso(at(1))), at(5))
    assert analysis_due(spec, st(last_analysis_at=to_iso(at(1))), at(11))  # interval 10s
    assert not analysis_due(spec, st(last_analysis_at=to_iso(at(55))), at(59))
    assert analysis_due(spec, st(last_analysis_at=to_iso(at(55))), at(60))  # the hold's end
    # waiting for the next step's pods: every interval, not every poll
    waiting = st(current_step=1, step_started_at=None, last_analysis_at=to_iso(at(60)))
    assert not analysis_due(spec, waiting, at(62))
    assert analysis_due(spec, waiting, at(70))
    no_metrics = spec.model_copy(update={"analysis": spec.analysis.model_copy(
        update={"metrics": [], "slo": None})})
    assert not analysis_due(no_metrics, st(), at(0))


def test_sequential_looks_after_every_scrape_and_window_every_interval() -> None:
    """Issue 30, item 1: new evidence can exist after each scrape; the sequential tests may look
    then at no cost in error (Ville), so a 1m interval with 15s scrapes looks every 15 s, never
    more often than every 5 s; the Window rule keeps its interval."""
    from inference_rollout.api.spec import AnalysisSpec

    def analysis(**kw: Any) -> AnalysisSpec:
        return AnalysisSpec.model_validate({
            "interval": "1m", "prometheus": {"address": "http://p:9090", "scrapeInterval": "15s"},
            "slo": {"ttftP99": "300ms"}, **kw})

    assert analysis().look_every_seconds == 15
    assert analysis(verdicts="Window").look_every_seconds == 60
    assert analysis(interval="10s").look_every_seconds == 10
    assert analysis(prometheus={"address": "http://p:9090", "scrapeInterval": "1s"}
                    ).look_every_seconds == 5
    spec = __import__("inference_rollout.api.spec", fromlist=["x"]).InferenceRolloutSpec.parse(
        body(strategy=steps((5, "1h"), 100)))
    spec = spec.model_copy(update={"analysis": analysis()})
    now = T0 + timedelta(seconds=100)
    status = InferenceRolloutStatus(stable_revision=STABLE, canary_revision=CANARY,
                                    current_step=0, canary_weight=5, step_started_at=to_iso(T0),
                                    last_analysis_at=to_iso(now - timedelta(seconds=14)))
    assert not analysis_due(spec, status, now)
    assert analysis_due(spec, status, now + timedelta(seconds=1))
    # a measurement that failed backs off to the interval: consecutiveErrorLimit (4) still
    # means 4 minutes of a broken Prometheus, not 4 scrapes
    status.analysis = {"slo-ttft-p99": MetricResult(verdict="Error", consecutive_errors=1)}
    assert not analysis_due(spec, status, now + timedelta(seconds=1))
    assert analysis_due(spec, status, now + timedelta(seconds=46))


def test_decide_is_pure_and_deterministic() -> None:
    sim, _, _ = in_release(strategy=steps((5, "1m"), 100))
    sim.run_until(at_step(0, 5))
    status = sim.status.model_copy(deep=True)
    obs = sim.world.observe(sim.body, generation=sim.generation)
    a = decide(sim.spec, status, obs, sim.now)
    b = decide(sim.spec, status, obs, sim.now)
    assert a == b and status == sim.status  # the input status is not mutated


def test_metric_result_counters_survive_a_status_round_trip() -> None:
    st = InferenceRolloutStatus(analysis={"e": MetricResult(consecutive_failures=1, passes=3)})
    back = InferenceRolloutStatus.parse(st.to_body())
    assert back == st
    assert st.to_body()["analysis"]["e"]["consecutiveFailures"] == 1


# --- regressions found by the property tests --------------------------------------------------


def test_a_step_outlasts_the_call_that_set_its_weight() -> None:
    """Without metrics and without a hold, and with a promote waiting, the weight still sits for
    one call: deciding again at the same instant is a fixed point."""
    sim, _, _ = in_release(analysis={"interval": "10s"}, strategy=steps(
        {"weight": 30, "manual": True}, 100))
    sim.reconcile(settle=True)
    sim.advance(2)
    d = sim.reconcile(promote=True)
    assert sim.status.canary_weight == 30 and sim.status.requests.promote
    again = decide(sim.spec, sim.status, sim.world.observe(sim.body, generation=sim.generation),
                   sim.now)
    assert again.actions == () and again.status == sim.status
    assert d.requeue_after == 0  # and the next call, right away, promotes
    sim.advance(1)
    sim.reconcile()
    assert sim.status.current_step == 1


def test_a_rollback_in_swap_mode_regrows_the_stable_in_the_same_decision() -> None:
    """The step's scaling was computed before the progress deadline rolled back: the later write
    for the same revision replaces the earlier one (regression: the stable stayed shrunk)."""
    sim, old, new = in_release(capacity={"mode": "swap", "maxSurge": 1}, strategy={
        **steps((50, "1h"), 100), "progressDeadline": "30s", "abortScaleDownDelay": "0s"})
    sim.world.auto_ready = False
    sim.reconcile()
    sim.world.set_ready(new, 1)
    sim.advance(2)
    sim.reconcile()
    assert (sim.world.deployments[old].desired, sim.world.deployments[new].desired) == (3, 2)
    sim.advance(30)
    d = sim.reconcile()
    assert sim.status.aborted
    assert [a for a in d.actions if isinstance(a, EnsureRevision)] == [
        EnsureRevision(new, 0), EnsureRevision(old, 4)]


def test_an_aborted_canary_keeps_its_pods_but_grows_no_more() -> None:
    """The deadline rolls back in the very call whose scaling would grow the canary (regression:
    the growth stayed in the actions, over the swap quota)."""
    sim, old, new = in_release(capacity={"mode": "swap", "maxSurge": 1}, strategy={
        **steps((50, "1h"), 100), "progressDeadline": "30s", "abortScaleDownDelay": "1m"})
    sim.world.auto_ready = False
    sim.reconcile()
    sim.world.set_ready(new, 1)
    sim.advance(31)
    d = sim.reconcile()
    assert sim.status.aborted
    assert [a for a in d.actions if isinstance(a, EnsureRevision)] == []
    assert (sim.world.deployments[old].desired, sim.world.deployments[new].desired) == (4, 1)


def test_promotion_never_rescales_the_revision_it_retires() -> None:
    sim, old, new = in_release(capacity={"mode": "swap", "maxSurge": 1},
                               strategy={**steps(100), "scaleDownDelay": "0s"})
    sim.run_until(at_step(0, 100))
    assert sim.world.deployments[old].desired == 1  # its warm pod, kept until promotion
    sim.advance(2)
    d = sim.reconcile(promote=True)
    assert sim.stable == new
    assert [a for a in d.actions if isinstance(a, (EnsureRevision, DeleteRevision))] == [
        DeleteRevision(old)]
    assert old not in sim.world.deployments


def test_promote_full_from_a_manual_wait_reaches_promotion() -> None:
    sim, _, new = in_release(strategy=steps({"weight": 10, "pause": "5s", "manual": True},
                                            {"weight": 50, "manual": True}, 100))
    sim.run_until(lambda s: s.status.paused_reason == r.MANUAL_STEP, limit=120)
    sim.reconcile(promote_full=True)
    assert sim.status.paused_reason is None
    sim.run_until(lambda s: s.stable == new, limit=120)


def test_promotion_clears_a_pause() -> None:
    sim, _, new = in_release(strategy=steps((5, "10s"), (100, "1h")))
    sim.run_until(at_step(1, 100), limit=120)
    sim.advance(5)
    sim.reconcile(pause=True)
    sim.advance(5)
    sim.reconcile(promote=True)
    assert sim.stable == new
    assert sim.status.paused_reason is None and sim.status.phase == "Healthy"


def test_a_promotion_repeated_after_a_lost_status_write_does_not_recreate_the_old_stable() -> None:
    sim, old, new = in_release(strategy={**steps((100, "10s")), "scaleDownDelay": "0s"})
    sim.run_until(at_step(0, 100))
    sim.advance(10)
    before = sim.status
    d = sim.reconcile()
    assert sim.stable == new and DeleteRevision(old) in d.actions
    assert old not in sim.world.deployments
    # the status write is lost: the restarted operator measures and decides again from the old
    # status, with the world as the lost decision left it
    assert analysis_due(sim.spec, before, sim.now)
    again = decide(sim.spec, before, sim.world.observe(
        sim.body, generation=sim.generation, measurements=sim.measure()), sim.now)
    assert again.status == d.status
    assert not [a for a in again.actions if isinstance(a, EnsureRevision) and a.revision == old]


@pytest.mark.parametrize("how", ["template", "abort"])
def test_a_swap_release_at_100_percent_goes_back_to_a_stable_with_a_pod(how: str) -> None:
    """A manual 100% step in swap mode, every GPU on the canary: a template change (which
    abandons the canary) or a rollback sends all traffic back to the stable in one write, so the
    stable must still have a pod then (regression found by the scaling property test: the stable
    had been drained to 0 and took 100% on no pod while the abandoned canary held the quota)."""
    sim, old, new = in_release(capacity={"mode": "swap", "maxSurge": 1},
                               strategy={**steps({"weight": 100, "manual": True}),
                                         "abortScaleDownDelay": "1m"})
    sim.run_until(at_step(0, 100))
    sim.run(30)
    assert sim.world.deployments[old].desired == 1  # the warm pod a rollback goes back to
    assert sim.world.deployments[new].desired == 4  # the quota's rest: 4 + maxSurge 1 - 1
    if how == "template":
        sim.release("m3")
        sim.reconcile()
    else:
        sim.reconcile(abort=True)
    assert sim.world.route is not None and sim.world.route.get(old) == 100
    assert sim.world.deployments[old].desired >= 1 and sim.world.deployments[old].ready >= 1
