"""The pass side counts the whole release (issue 30, item 3; core/sequential.py).

What must hold, checked exactly by dynamic programming over every path of a release's counts,
looking after every request: a canary whose share of bad requests is ≥ p1 at every step is handed
the weight ``w`` with probability ≤ β^(w/100) and promoted with probability ≤ β; a healthy one
needs the release's clean requests, not every step's.  Each step still needs its own minimum,
so a canary that breaks grossly at one step's load is failed there, not moved on by the
evidence of the steps before.  The carrying is driven through ``verdicts.record``, the function
the core calls at every look.
"""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from tests.unit.coresim import T0
from tests.unit.test_core_verdicts import error_rate, errors

from inference_rollout.api.spec import Step
from inference_rollout.api.status import MetricResult
from inference_rollout.core import sequential as sq
from inference_rollout.core import verdicts as an

RATES = sq.error_rates(0.01, metrics=3, steps=4)
WEIGHTS = (5, 20, 50, 100)


def exposures(weights: tuple[int, ...] = WEIGHTS) -> list[float]:
    steps = [Step(weight=w) for w in weights]
    return [an.pass_exposure(steps, i) for i in range(len(steps))]


def test_a_pass_asks_for_the_share_of_the_weight_it_hands_on() -> None:
    assert exposures() == [0.2, 0.5, 1.0, 2.0]  # the promotion: twice a step's evidence
    assert exposures((10, 60)) == [0.6, 2.0]
    assert an.pass_exposure([Step(weight=5)], None) == sq.PROMOTION_EXPOSURE


@pytest.mark.parametrize(("p0", "minimum"), [(0.01, 2), (0.001, 2), (0.05, 3)])
def test_the_step_minimum_is_what_fails_a_step_whose_every_request_is_bad(
        p0: float, minimum: int) -> None:
    assert sq.step_minimum(p0, RATES) == minimum
    assert sq.bernoulli(minimum, minimum, minimum, p0, RATES).verdict == "Fail"
    assert sq.bernoulli(minimum - 1, minimum - 1, minimum - 1, p0, RATES).verdict != "Fail"


def test_a_step_with_the_release_evidence_passes_on_its_own_minimum() -> None:
    before = sq.Carried(200, 0)  # ample clean evidence from the earlier steps
    assert sq.bernoulli(1, 0, 0, 0.01, RATES, carried=before).verdict == "Inconclusive"
    o = sq.bernoulli(2, 0, 0, 0.01, RATES, carried=before)
    assert (o.verdict, o.requests, o.carried) == ("Pass", 2, before)
    # the same two requests, surely bad: this step's own fail side decides first
    assert sq.bernoulli(2, 2, 2, 0.01, RATES, carried=before).verdict == "Fail"
    # possibly bad (between the buckets around the limit): not failing, but leaning bad, so
    # the step waits for clean requests of its own (39 per possibly bad one)
    o = sq.bernoulli(2, 0, 1, 0.01, RATES, carried=before)
    assert o.verdict == "Inconclusive" and o.more_requests == 39
    assert sq.bernoulli(41, 0, 1, 0.01, RATES, carried=before).verdict == "Pass"
    assert sq.bernoulli(40, 0, 1, 0.01, RATES, carried=before).verdict == "Inconclusive"


def test_the_first_step_needs_its_share_and_the_last_the_whole() -> None:
    needed = math.log(1 / RATES.beta) / math.log(0.99 / 0.95)  # 111.7 clean requests
    for exposure in (0.2, 0.5, 1.0, 2.0):
        n = math.ceil(exposure * needed)
        assert sq.bernoulli(n, 0, 0, 0.01, RATES, exposure=exposure).verdict == "Pass"
        o = sq.bernoulli(n - 1, 0, 0, 0.01, RATES, exposure=exposure)
        assert (o.verdict, o.more_requests) == ("Inconclusive", 1)
    # 60 clean before, 52 in the step that hands on all traffic: the release's 112
    assert sq.bernoulli(52, 0, 0, 0.01, RATES, carried=sq.Carried(60, 0)).verdict == "Pass"
    assert sq.bernoulli(51, 0, 0, 0.01, RATES, carried=sq.Carried(60, 0)).verdict != "Pass"
    # the promotion: 224 in the release (⌈2 × 111.7⌉)
    assert sq.bernoulli(124, 0, 0, 0.01, RATES, carried=sq.Carried(100, 0),
                        exposure=2.0).verdict == "Pass"
    assert sq.bernoulli(123, 0, 0, 0.01, RATES, carried=sq.Carried(100, 0),
                        exposure=2.0).verdict != "Pass"


def _release_probabilities(p: float, p0: float, per_step: int,
                           exposure: list[float]) -> tuple[list[float], float]:
    """Exact P(the canary is handed each next step's weight) and P(failed), true share ``p`` at
    every step, looking after every request, each step at most ``per_step`` requests (then the
    release stays undecided).  A pass moves on at once with the step's counts carried."""
    entering: dict[tuple[int, int], float] = {(0, 0): 1.0}  # (carried requests, bad) → P
    handed, failed = [], 0.0
    for share in exposure:
        leaving: dict[tuple[int, int], float] = {}
        for (c_n, c_bad), weight in entering.items():
            carried = sq.Carried(c_n, c_bad)
            alive = {0: weight}  # this step's bad count → P, still undecided
            for n in range(1, per_step + 1):
                nxt: dict[int, float] = {}
                for bad, q in alive.items():
                    nxt[bad] = nxt.get(bad, 0.0) + q * (1 - p)
                    nxt[bad + 1] = nxt.get(bad + 1, 0.0) + q * p
                alive = {}
                for bad, q in nxt.items():
                    verdict = sq.bernoulli(n, bad, bad, p0, RATES, carried=carried,
                                           exposure=share).verdict
                    if verdict == "Pass":
                        key = (c_n + n, c_bad + bad)
                        leaving[key] = leaving.get(key, 0.0) + q
                    elif verdict == "Fail":
                        failed += q
                    elif q > 1e-13:
                        alive[bad] = q
        handed.append(sum(leaving.values()))
        entering = leaving
    return handed, failed


@pytest.mark.parametrize("p0", [0.05, 0.01])
def test_a_bad_canary_is_handed_weight_w_at_most_beta_to_the_w_over_100(p0: float) -> None:
    """The guarantee in plain words, exactly: moved to 20 % ≤ β^0.2, to 50 % ≤ β^0.5, to 100 %
    ≤ β and promoted ≤ β², with its bad share exactly p1 (worse shares pass less)."""
    per_step = 60 if p0 == 0.05 else 150
    handed, _ = _release_probabilities(sq.alternative(p0), p0, per_step, exposures())
    bounds = [RATES.beta ** e for e in exposures()]
    assert all(h <= b for h, b in zip(handed, bounds, strict=True)), (handed, bounds)
    assert handed[-1] <= RATES.beta ** 2  # promoted
    # not vacuous: the early steps do let a bad canary through sometimes (the fail side and the
    # later steps catch it), which is the price of a fast healthy release
    assert handed[0] > 0.05


def test_a_healthy_canary_at_5_percent_errors_limit_goes_through_on_the_release_evidence() -> None:
    """At p0 = 5 % a healthy canary (1 %) passing each step on its own would need ~20 clean
    requests per step; carried, the release needs ~20 to reach 100 % and ~40 to be promoted,
    each step at least its own 3."""
    handed, failed = _release_probabilities(0.01, 0.05, 40, exposures())
    assert handed[-1] > 0.95 and failed < RATES.alpha * 4


STEP_1, STEP_2 = "2026-12-06T12:00:00.000Z", "2026-12-06T12:05:00.000Z"


def look(prev: MetricResult | None, step: str | None, requests: float, failed: float,
         limit: float = 0.01, exposure: float = 1.0) -> MetricResult:
    return an.record(error_rate(max=limit), prev, errors(requests, failed),
                     T0 + timedelta(seconds=requests), RATES, step=step, exposure=exposure)


def test_record_carries_each_step_period_once() -> None:
    res = look(None, STEP_1, 10, 0, exposure=0.2)
    res = look(res, STEP_1, 30, 0, exposure=0.2)
    assert res.carried is None and res.verdict == "Pass"  # 30 ≥ 0.2 × 112
    # between steps: the operator measures the last window (no step); nothing is added twice
    res = look(res, None, 25, 0)
    assert res.carried is not None and (res.carried.requests, res.carried.bad_requests) == (30, 0)
    res = look(res, STEP_2, 3, 0)
    assert res.carried is not None and (res.carried.requests, res.verdict) == (30, "Inconclusive")
    res = look(res, STEP_2, 82, 0)
    assert res.carried is not None and (res.carried.requests, res.verdict) == (30, "Pass")
    assert "≤ 0/82 failed this step, ≤ 0/112 this release" in (res.test or "")


def test_a_failing_period_is_carried_as_all_bad_and_a_new_limit_starts_afresh() -> None:
    res = look(None, STEP_1, 20, 6)  # 6 of 20 failed at a 1 % limit (a failureLimit lets it on)
    assert res.verdict == "Fail"
    res = look(res, STEP_2, 10, 0)
    assert res.carried is not None and (res.carried.requests, res.carried.bad_requests) != (0, 0)
    assert res.carried.bad_requests == res.carried.requests  # the fail side's counts: all bad
    res = look(res, STEP_2, 20, 0, limit=0.02)  # the spec's limit changed mid-release
    assert res.carried is None


def test_the_window_rule_carries_nothing() -> None:
    res = an.record(error_rate(max=0.01), None, errors(30, 0), T0, None, step=STEP_1)
    res = an.record(error_rate(max=0.01), res, errors(30, 0), T0, None, step=STEP_2)
    assert res.carried is None
