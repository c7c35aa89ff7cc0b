"""Which decisions become notices (issue 17, notifications): each rollback, promotion and pause
once, with the reason and message the core gave it, driven through whole releases."""

from __future__ import annotations

from tests.unit.coresim import Sim
from tests.unit.test_core_decide import analysis, at_step, in_release, steps
from tests.unit.test_core_decide_verdicts import releasing

from inference_rollout.api import reasons as r
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.notices import Notice, notices


def heard(sim: Sim, first_before: InferenceRolloutStatus) -> list[Notice]:
    """Every notice of the sim's decisions, each taken against the status it replaced."""
    before = first_before
    out: list[Notice] = []
    for d in sim.decisions:
        out.extend(notices(before, d))
        before = d.status
    return out


def test_a_release_that_passes_is_one_promotion_notice() -> None:
    sim, old, new = in_release(strategy=steps((20, "30s"), 100))
    start = sim.status
    sim.run_until(lambda s: s.status.stable_revision == new, limit=600)
    sim.run(120)
    (promoted,) = heard(sim, start)
    assert (promoted.kind, promoted.reason, promoted.rolled_back) == ("Promotion", r.PROMOTED,
                                                                       False)
    assert promoted.message.startswith(f"revision {new} promoted to stable; {old}")
    assert promoted.stable_revision == new


def test_a_failed_verdict_is_one_rollback_notice_naming_the_canary_and_why() -> None:
    sim, old, new = in_release(strategy=steps((20, "1h"), 100))
    start = sim.status
    sim.run_until(at_step(0, 20), limit=300)
    sim.advance(10)
    sim.verdicts = "fail"
    sim.run(300)  # reconciles after the rollback decide nothing new
    (rollback,) = heard(sim, start)
    assert (rollback.kind, rollback.reason, rollback.rolled_back) == (
        "Rollback", r.ANALYSIS_FAILED, True)
    assert rollback.message == "rolled back: errors 1.02 (Fail: ≤ 0.01)"
    assert (rollback.stable_revision, rollback.canary_revision, rollback.canary_weight) == (
        old, new, 0)


def test_a_pause_on_request_is_a_notice_each_time_it_starts() -> None:
    sim, _, _ = in_release(strategy=steps((5, "1h"), 100))
    sim.run_until(at_step(0, 5))
    start = sim.status
    sim.reconcile(pause=True)
    sim.run(60)
    sim.reconcile(resume=True)
    sim.run(30)
    sim.reconcile(pause=True)
    kinds = [(n.kind, n.reason, n.message) for n in heard(sim, start)]
    assert kinds == [("Pause", r.PAUSE_REQUESTED, r.PAUSE_REQUESTED_MSG)] * 2


def test_the_progress_deadline_has_its_own_kind() -> None:
    sim, _, new = in_release(strategy={**steps((20, "1h"), 100), "progressDeadline": "60s"})
    sim.run_until(at_step(0, 20))
    start = sim.status
    sim.world.auto_ready = False
    sim.world.set_ready(new, 0)
    sim.run(90, settle=False)
    (deadline,) = heard(sim, start)
    assert (deadline.kind, deadline.reason, deadline.rolled_back) == (
        "ProgressDeadline", r.PROGRESS_DEADLINE, True)
    assert deadline.message.startswith("rolled back: canary had 0/")


def test_the_inconclusive_limit_pauses_or_rolls_back_under_its_own_kind() -> None:
    for policy, rolled_back in (("Pause", False), ("Rollback", True)):
        sim = releasing(rate=0.05, inconclusiveLimit="5m", onInconclusive=policy)
        start = sim.status
        sim.run_until(lambda s: s.status.paused_reason is not None or s.status.aborted,
                      limit=900)
        sim.run(120)
        (limit,) = heard(sim, start)
        assert (limit.kind, limit.reason, limit.rolled_back) == (
            "InconclusiveLimit", r.INCONCLUSIVE_LIMIT, rolled_back)
        assert "errors needs" in limit.message or "still undecided" in limit.message


def test_an_error_limit_pause_is_a_pause_with_the_core_s_message() -> None:
    sim, _, _ = in_release(analysis=analysis(consecutiveErrorLimit=3),
                           strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    start = sim.status
    sim.verdicts = "error"
    sim.run(120)
    (paused,) = heard(sim, start)
    assert (paused.kind, paused.reason) == ("Pause", r.ERROR_LIMIT)
    assert paused.message.startswith("paused: errors") and "3 times in a row" in paused.message
