"""The chaos run's rules (bench/chaos_history.py) each catch the history that breaks them, and
pass a clean one: a judge that cannot fail would make the run's "0 violations" meaningless."""

from __future__ import annotations

from bench.chaos_history import Seen, Started, judge_run

PASS: dict[str, str | None] = {"errors": "Pass"}
FAIL: dict[str, str | None] = {"errors": "Fail"}


def seen(step: int | None, weight: int, *, gen: int = 2,
         verdicts: dict[str, str | None] | None = None, canary: str | None = "c2",
         stable: str = "s1", aborted: bool = False, phase: str = "Progressing",
         reason: str | None = None) -> Seen:
    return Seen(at=0.0, name="r", generation=gen, phase=phase, step=step, weight=weight,
                canary=canary, stable=stable, aborted=aborted, verdicts=verdicts or {},
                reason=reason)


def promoted_release(*middle: Seen) -> list[Seen]:
    return [seen(0, 0), seen(0, 20), *middle,
            seen(None, 0, canary=None, stable="c2", phase="Healthy", verdicts=PASS)]


def test_a_clean_promotion_and_a_clean_rollback_break_no_rule() -> None:
    good = promoted_release(seen(0, 20, verdicts=PASS), seen(1, 50, verdicts=PASS),
                            seen(2, 100, verdicts=PASS))
    bad = [seen(0, 0, gen=3, canary="c3", stable="c2"),
           seen(0, 20, gen=3, canary="c3", stable="c2", verdicts=FAIL),
           seen(0, 0, gen=3, canary="c3", stable="c2", verdicts=FAIL, aborted=True,
                phase="Degraded")]
    out = judge_run([Started("r", 2, bad=False), Started("r", 3, bad=True)], good + bad,
                    {"r": {"c2": 100, "c3": 0}})
    assert out["violations"] == []
    assert out["outcomes"] == {"bad rolled-back": 1, "good promoted": 1}


def test_a_skipped_step_is_a_violation() -> None:
    history = promoted_release(seen(0, 20, verdicts=PASS), seen(2, 100, verdicts=PASS))
    assert any("step 0 -> 2" in v for v in
               judge_run([Started("r", 2, False)], history, {})["violations"])


def test_a_step_advance_without_every_metric_passing_is_a_violation() -> None:
    history = promoted_release(seen(0, 20, verdicts={"errors": "Inconclusive"}),
                               seen(1, 50, verdicts={"errors": "Inconclusive"}),
                               seen(2, 100, verdicts=PASS))
    violations = judge_run([Started("r", 2, False)], history, {})["violations"]
    assert any("step 0 -> 1 without every metric passing" in v for v in violations)


def test_a_promotion_on_a_failing_measurement_is_a_violation() -> None:
    history = [seen(0, 0), seen(0, 20, verdicts=PASS), seen(1, 50, verdicts=PASS),
               seen(2, 100, verdicts=PASS), seen(2, 100, verdicts=FAIL),
               seen(None, 0, canary=None, stable="c2", phase="Healthy", verdicts=FAIL)]
    violations = judge_run([Started("r", 2, False)], history, {})["violations"]
    assert any("promoted without every metric passing" in v for v in violations)


def test_a_bad_canary_promoted_is_a_violation_and_a_good_one_rolled_back_is_counted() -> None:
    history = promoted_release(seen(0, 20, verdicts=PASS), seen(1, 50, verdicts=PASS))
    assert any("bad canary" in v for v in
               judge_run([Started("r", 2, True)], history, {})["violations"])
    rolled = [seen(0, 20, verdicts=FAIL),
              seen(0, 0, aborted=True, phase="Degraded", reason="AnalysisFailed")]
    out = judge_run([Started("r", 2, False)], rolled, {"r": {"s1": 100, "c2": 0}})
    assert out["violations"] == [] and out["false_rollbacks"] == 1
    assert out["rollback_reasons"] == {"good: AnalysisFailed": 1}


def test_traffic_left_on_a_rolled_back_canary_is_a_violation() -> None:
    rolled = [seen(0, 20, verdicts=FAIL), seen(0, 0, aborted=True, phase="Degraded")]
    out = judge_run([Started("r", 2, True)], rolled, {"r": {"s1": 95, "c2": 5}})
    assert out["violations"] == ["r: rolled back, yet its route still sends 5% to canary c2"]


def test_a_release_overtaken_before_its_status_was_written_is_superseded() -> None:
    out = judge_run([Started("r", 2, False), Started("r", 3, False)],
                    [seen(0, 20, gen=3, canary="c3", verdicts=PASS)], {})
    assert out["outcomes"] == {"good progressing": 1, "good superseded": 1}
