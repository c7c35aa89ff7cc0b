"""The decisions that keep traffic safe when the world or the spec changes under a release:
the capacity guard (issue 10, item 5), steps edited mid-release, a spec that stops parsing and an
unexpected failure (issue 9, items 4 and 5), and the fact a rollback carries for the reconciler's
write order (issue 9, item 1)."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.coresim import T0
from tests.unit.test_core_decide import analysis, at_step, events, in_release, of, steps

from inference_rollout.api import reasons as r
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core import validation
from inference_rollout.core.decide import analysis_due
from inference_rollout.core.types import SetWeights

#: Revisions as the status records them (ten hex characters of the template hash).
STABLE, CANARY = "aaaaaaaaaa", "bbbbbbbbbb"


def test_a_canary_that_loses_its_ready_pods_loses_its_weight_in_one_write() -> None:
    sim, old, new = in_release(strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    sim.world.set_ready(new, 0)
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert d.status.canary_weight == 0 and r.CANARY_UNAVAILABLE in events(d)
    (write,) = of(d, SetWeights)
    assert d.actions[0] == write and write.canary_weight == 0
    assert sim.world.route == {old: 100, new: 0}
    assert not d.status.aborted and d.status.current_step == 0


def test_the_weight_returns_when_the_pods_do_and_the_hold_starts_again() -> None:
    sim, _old, new = in_release(strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    first_start = sim.status.step_started_at
    sim.world.set_ready(new, 0)
    sim.advance(5)
    sim.reconcile(settle=False)
    sim.advance(5)
    sim.run_until(at_step(0, 20), limit=60)  # pods come back (the sim settles them)
    assert sim.status.step_started_at != first_start


def test_a_canary_whose_pods_stay_gone_is_rolled_back_after_the_progress_deadline() -> None:
    sim, old, new = in_release(strategy={**steps((20, "1h"), 100), "progressDeadline": "60s"})
    sim.run_until(at_step(0, 20))
    sim.world.auto_ready = False
    sim.world.set_ready(new, 0)
    sim.advance(5)
    sim.reconcile(settle=False)
    sim.run(70, settle=False)
    assert sim.status.aborted and sim.status.abort_reason == r.PROGRESS_DEADLINE
    assert sim.world.route == {old: 100, new: 0}


def test_a_partial_loss_keeps_the_share_the_ready_pods_carry() -> None:
    sim, _old, new = in_release(replicas=4, strategy=steps((50, "1h"), 100))
    sim.run_until(at_step(0, 50))
    sim.world.set_ready(new, 1)  # one of two canary pods left: 25% of a 4-pod fleet
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert d.status.canary_weight == 25


def test_traffic_is_not_moved_onto_a_stable_without_ready_pods() -> None:
    """Swap mode at 100%: the stable kept one warm pod; if that pod is not Ready either,
    lowering the canary's weight would send users to nothing."""
    sim, old, new = in_release(capacity={"mode": "swap", "maxSurge": 1},
                               strategy=steps((100, "1h")))
    sim.run_until(at_step(0, 100))
    assert sim.world.deployments[old].desired == 1
    sim.world.set_ready(old, 0)
    sim.world.set_ready(new, 3)
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert d.status.canary_weight == 100 and r.CANARY_UNAVAILABLE not in events(d)


def test_a_canary_at_100_percent_that_loses_a_pod_gives_its_share_to_the_warm_stable_pod() -> None:
    """Swap mode at 100%: the stable's warm pod (kept until promotion) takes the share the
    canary's Ready pods can no longer carry, as at any other step."""
    sim, old, new = in_release(capacity={"mode": "swap", "maxSurge": 1},
                               strategy=steps((100, "1h")))
    sim.run_until(at_step(0, 100))
    assert sim.world.deployments[old].ready == 1
    sim.world.set_ready(new, 3)
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert d.status.canary_weight == 75 and r.CANARY_UNAVAILABLE in events(d)


def test_steps_shortened_mid_release_continue_at_a_step_that_still_exists() -> None:
    sim, _old, _new = in_release(strategy=steps((5, "1h"), (20, "1h"), (50, "1h"), 100))
    sim.run_until(at_step(0, 5))
    sim.status.current_step, sim.status.canary_weight = 2, 50  # as if at 50%
    sim.body = {**sim.body, "strategy": steps((10, "1h"), 100)}
    assert analysis_due(sim.spec, sim.status, sim.now) in (True, False)  # no IndexError
    d = sim.reconcile()
    assert r.STEPS_CHANGED in events(d)
    # step 2 (100%) is the first that carries 50%; the one canary pod carries only 25% of the
    # 4-pod fleet, so the capacity guard lowers it until the step's pods are Ready
    assert d.status.current_step == 1 and d.status.canary_weight == 25


def test_an_unparseable_spec_takes_the_canary_off_the_route() -> None:
    status = InferenceRolloutStatus(stable_revision=STABLE, canary_revision=CANARY, current_step=1,
                                    canary_weight=50, step_started_at="2026-12-01T12:00:00Z")
    new = validation.unparseable_status(status, ["spec.x: bad"], 3, T0)
    assert new.canary_weight == 0 and new.step_started_at is None
    assert new.phase == "Degraded" and new.canary_revision == CANARY
    write = validation.traffic_to_stable(status, {STABLE: 50, CANARY: 50}, deleting=False)
    assert write == SetWeights(STABLE, CANARY, 0)
    assert validation.traffic_to_stable(status, {STABLE: 100, CANARY: 0}, deleting=False) is None
    assert validation.traffic_to_stable(status, {STABLE: 100, CANARY: 0}, deleting=True) == \
        SetWeights(STABLE, None, 0)
    assert validation.traffic_to_stable(status, None, deleting=True) is None


def test_an_unexpected_failure_rolls_a_release_back_and_says_why() -> None:
    status = InferenceRolloutStatus(stable_revision=STABLE, canary_revision=CANARY, current_step=1,
                                    canary_weight=50)
    new = validation.failed_status(status, "IndexError: boom", 3, T0)
    assert new.aborted and new.abort_reason == r.RECONCILE_FAILED and new.canary_weight == 0
    cond = {c.type: c for c in new.conditions}
    assert cond[r.RECONCILE_FAILED].status == "True" and "IndexError" in new.message
    idle = validation.failed_status(InferenceRolloutStatus(stable_revision=STABLE), "x", 3, T0)
    assert not idle.aborted


def test_the_next_successful_reconcile_clears_reconcile_failed() -> None:
    sim, _old, _new = in_release()
    sim.status = validation.failed_status(sim.status, "boom", 1, T0)
    sim.advance(1)
    d = sim.reconcile()
    cond = {c.type: c for c in d.status.conditions}
    assert cond[r.RECONCILE_FAILED].status == "False"


def test_a_rollback_decision_says_so_for_the_write_order() -> None:
    sim, _old, _new = in_release(strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    sim.verdicts = "fail"
    sim.advance(timedelta(minutes=1).total_seconds())
    d = sim.run_until(lambda s: s.status.aborted, limit=120)
    assert d.rolled_back == r.ANALYSIS_FAILED
    assert sim.reconcile().rolled_back is None  # staying rolled back is not a new rollback


def test_series_that_vanish_while_ready_pods_carry_traffic_count_as_failing() -> None:
    sim, old, _new = in_release(strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    sim.advance(10)
    sim.reconcile()  # a passing measurement with a value, in this step
    sim.verdicts = "nodata"
    sim.advance(10)
    d = sim.run_until(lambda s: s.status.aborted, limit=30)
    assert d.rolled_back == r.ANALYSIS_FAILED
    assert "vanished" in (sim.status.analysis["errors"].test or "")
    assert sim.world.route is not None and sim.world.route[old] == 100


def test_no_data_before_any_value_is_an_error_not_a_failure() -> None:
    sim, _old, _new = in_release(strategy=steps((20, "1h"), 100))
    sim.verdicts = "nodata"
    sim.run_until(at_step(0, 20))
    sim.advance(80)  # past the first scrapes' grace (10 s + 2 × 30 s scrapes)
    d = sim.reconcile()
    assert not d.status.aborted and d.status.analysis["errors"].verdict == "Error"


def test_no_series_in_the_first_scrapes_of_a_new_canary_is_inconclusive_not_an_error() -> None:
    """The e2e flake of issue 13 (2026-12-04, run 2): a canary's pods turn Ready, its 5 % is
    written, and Prometheus first scrapes them ~9 s later.  Four NoData looks in those seconds
    (at the write, at the gateway's acceptance, and two intervals) paused the release at
    consecutiveErrorLimit 4."""
    sim, _old, _new = in_release(
        analysis={**analysis(interval="5s"), "consecutiveErrorLimit": 4,
                  "prometheus": {"address": "http://prom:9090", "scrapeInterval": "1s"}},
        strategy=steps((5, "1h"), 100))
    sim.verdicts = "nodata"
    sim.run_until(at_step(0, 5))
    for _ in range(3):  # within 12 s = 10 s of discovery + 2 scrapes: still collecting
        sim.advance(3)
        sim.reconcile()
        result = sim.status.analysis["errors"]
        assert (result.verdict, result.consecutive_errors) == ("Inconclusive", 0)
        assert result.error is not None and result.error.startswith("collecting: no canary series")
    for _ in range(4):  # after it, no series is an error again, and the limit still applies
        sim.advance(5)
        sim.reconcile()
    assert sim.status.paused_reason == r.ERROR_LIMIT


def test_a_manual_step_that_loses_its_pods_waits_for_them_then_for_promote_again() -> None:
    """Found by the property test: the guard lowered the weight of a step held for `promote`,
    and the held step then never raised it again (a deadlock)."""
    sim, _old, new = in_release(strategy=steps({"weight": 20, "manual": True}, 100))
    sim.run_until(lambda s: s.status.paused_reason == r.MANUAL_STEP)
    sim.world.set_ready(new, 0)
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert d.status.canary_weight == 0 and d.status.paused_reason is None
    sim.run_until(lambda s: s.status.paused_reason == r.MANUAL_STEP, limit=120)
    assert sim.status.canary_weight == 20


def test_a_canary_failing_within_its_limit_that_loses_its_pods_is_rolled_back() -> None:
    """Found by the CI property run: a tolerated Fail held the weight at 0 for ever after the
    guard (nothing measures at 0%); failing and losing its pods now ends the release."""
    sim, old, new = in_release(strategy=steps((20, "1h"), 100),
                               analysis={"interval": "10s", "failureLimit": 2,
                                         "prometheus": {"address": "http://prom:9090"},
                                         "metrics": [{"name": "errors", "template": "error-rate",
                                                      "max": 0.01}]})
    sim.run_until(at_step(0, 20))
    sim.verdicts = "fail"
    sim.advance(10)
    sim.reconcile()
    assert not sim.status.aborted and sim.status.analysis["errors"].verdict == "Fail"
    sim.world.set_ready(new, 0)
    sim.advance(1)
    d = sim.reconcile(settle=False)
    assert d.status.aborted and d.rolled_back == r.CANARY_UNAVAILABLE
    assert sim.world.route == {old: 100, new: 0}


def test_a_scale_up_mid_step_is_not_taken_for_lost_canary_pods() -> None:
    """Scaled from 2 to 8 at 20%: the canary needs a second pod for the new fleet, but its one
    pod was not lost.  The weight and the hold stay while that pod starts (before, the guard cut
    the weight to 12% and restarted the step as soon as the stable's new pods were Ready: seen
    in the e2e autoscaling test).  A pod lost afterwards still lowers the weight."""
    sim, old, new = in_release(replicas=2, strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    started = sim.status.step_started_at
    assert sim.status.weight_replicas == 2
    sim.world.auto_ready = False
    sim.body = {**sim.body, "replicas": 8}
    sim.reconcile(settle=False)
    sim.world.set_ready(old, 8)  # the stable's new pods first; the canary's second still loading
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert (d.status.canary_weight, d.status.step_started_at) == (20, started)
    assert r.CANARY_UNAVAILABLE not in events(d)
    sim.world.set_ready(new, 2)
    sim.advance(5)
    sim.reconcile(settle=False)
    assert sim.status.weight_replicas == 8  # carried at the new size: it is the reference now
    sim.world.set_ready(new, 1)  # and now a canary pod is lost
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert d.status.canary_weight == 12 and r.CANARY_UNAVAILABLE in events(d)


def test_a_canary_that_loses_its_pod_while_the_fleet_grows_still_loses_its_weight() -> None:
    sim, old, new = in_release(replicas=2, strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    sim.world.auto_ready = False
    sim.body = {**sim.body, "replicas": 8}
    sim.reconcile(settle=False)
    sim.world.set_ready(old, 8)
    sim.world.set_ready(new, 0)
    sim.advance(5)
    d = sim.reconcile(settle=False)
    assert d.status.canary_weight == 0 and r.CANARY_UNAVAILABLE in events(d)


def test_no_data_while_the_pods_were_lost_does_not_count_toward_the_error_limit() -> None:
    """The e2e flake of issue 13 (run 2 of 2026-12-03): NoData errors while the canary's pods
    went, more while the returned pods' series were not scraped yet, and the release paused at
    the limit of 4 although nothing was wrong with Prometheus or the metric."""
    sim, _old, new = in_release(analysis={**analysis(), "consecutiveErrorLimit": 4},
                                strategy=steps((20, "1h"), 100))
    sim.run_until(at_step(0, 20))
    sim.advance(10)
    sim.reconcile()  # a value in this step
    sim.world.auto_ready = False
    sim.world.set_ready(new, 0)
    sim.verdicts = "nodata"
    sim.advance(10)
    d = sim.reconcile(settle=False)  # gone: an error, and the guard takes the weight
    assert d.status.canary_weight == 0 and r.CANARY_UNAVAILABLE in events(d)
    assert d.status.analysis["errors"].verdict == "Error"
    assert d.status.analysis["errors"].consecutive_errors == 0  # forgotten with the weight
    sim.world.auto_ready = True
    sim.run_until(at_step(0, 20), limit=60)  # back; their series are not scraped yet
    for _ in range(3):
        sim.advance(10)
        sim.reconcile()
    errors = sim.status.analysis["errors"]
    assert (errors.verdict, errors.consecutive_errors) == ("Inconclusive", 0)  # collecting
    assert sim.status.paused_reason is None
    sim.verdicts = "pass"
    sim.advance(10)
    sim.reconcile()
    assert sim.status.analysis["errors"].verdict == "Pass"
