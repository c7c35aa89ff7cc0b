"""Late breakage (issue 30, item 2): the sequential test restarted at every look of a step.

A canary that turns bad after 10,000 good requests must be stopped within a handful of bad ones,
not after the ~250 the whole-step test needs to outweigh the good ones; and a healthy canary must
still be failed with probability ≤ α, however many looks (core/sequential.py, "Late breakage").
The story is driven through ``verdicts.record``, the function the core calls at every look, so
the restart points are kept, numbered and reset exactly as in a release.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

import pytest
from scipy import stats
from tests.unit.coresim import T0
from tests.unit.test_core_verdicts import error_rate, errors

from inference_rollout.api.spec import MetricSpec
from inference_rollout.api.status import KEPT_RESTARTS, MetricResult
from inference_rollout.core import sequential as sq
from inference_rollout.core import verdicts as an

STEP = "2026-12-06T12:00:00.000Z"


def look(metric: MetricSpec, prev: MetricResult | None, requests: float, failed: float,
         rates: sq.ErrorRates, step: str = STEP, restarts: bool = True) -> MetricResult:
    m = errors(requests, failed)
    if not restarts:  # the whole-step test alone, as before the detector
        prev = None
    return an.record(metric, prev, m, T0 + timedelta(seconds=requests), rates, step=step)


def requests_bad_until_fail(limit: float, good: int, per_look: int, bad_share: float = 1.0,
                            restarts: bool = True, metrics: int = 3) -> int | None:
    """Bad requests the canary answers after ``good`` good ones until the test fails."""
    rates = sq.error_rates(0.01, metrics=metrics, steps=4)
    metric = error_rate(max=limit)
    n = failed = 0.0
    res: MetricResult | None = None
    while n < good + 20_000:
        for _ in range(per_look):
            n += 1
            if n > good:
                failed += bad_share
        res = look(metric, res, n, math.floor(failed), rates, restarts=restarts)
        if res.verdict == "Fail":
            return math.floor(failed)
    return None


def test_the_weights_sum_to_one() -> None:
    total = (1 - sq.RESTART_BUDGET) + sum(sq.restart_weight(j) for j in range(1, 200_001))
    assert total <= 1.0 and total == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize(("limit", "within"), [(0.01, 10), (0.05, 12)])
@pytest.mark.parametrize("per_look", [1, 2, 10])
def test_a_canary_that_breaks_after_10000_good_requests_is_stopped_within_a_handful(
        limit: float, within: int, per_look: int) -> None:
    """Every request bad after 10,000 good ones: stopped within 10 bad requests at a 1 % limit
    (a p99, or 1 % errors), 12 at 5 % (its bad requests are weaker evidence), where the
    whole-step test alone needs 260-1,500. A look every 10 requests stops at the first look
    after the breakage (10 bad): what the look rate allows."""
    caught = requests_bad_until_fail(limit, 10_000, per_look)
    assert caught is not None and caught <= within, caught
    alone = requests_bad_until_fail(limit, 10_000, per_look, restarts=False)
    assert alone is not None and alone >= 8 * caught


def test_half_bad_after_the_break_is_stopped_within_12() -> None:
    caught = requests_bad_until_fail(0.01, 10_000, 10, bad_share=0.5)
    assert caught is not None and caught <= 12, caught


def test_the_fail_names_the_look_it_counted_from() -> None:
    rates = sq.error_rates(0.01, metrics=1, steps=4)
    metric = error_rate(max=0.01)
    res = None
    for n in range(100, 2100, 100):  # 2,000 good requests, a look every 100
        res = look(metric, res, n, 0, rates)
    assert res is not None and res.verdict != "Fail"
    assert [r.index for r in res.restarts] == list(range(17, 21))  # the latest 4 of 20 looks
    res = look(metric, res, 2010, 10, rates)  # then 10 of 10 failed
    assert res.verdict == "Fail"
    assert res.test is not None and res.test.startswith("10/10 failed since look 20 of the step")


def test_restarts_belong_to_their_step() -> None:
    """A new step counts from its own start: the last step's looks must not be subtracted
    from its counts (their differences would be no evidence of anything)."""
    rates = sq.error_rates(0.01, metrics=1, steps=4)
    metric = error_rate(max=0.01)
    res = look(metric, None, 500, 0, rates, step="2026-12-06T12:00:00.000Z")
    res = look(metric, res, 900, 0, rates, step="2026-12-06T12:00:00.000Z")
    assert len(res.restarts) == 2
    res = look(metric, res, 300, 0, rates, step="2026-12-06T12:05:00.000Z")
    assert [(r.index, r.requests) for r in res.restarts] == [(1, 300.0)]
    assert res.restart_step == "2026-12-06T12:05:00.000Z"


def test_a_look_with_no_new_request_is_no_restart() -> None:
    rates = sq.error_rates(0.01, metrics=1, steps=4)
    metric = error_rate(max=0.01)
    res = look(metric, None, 50, 0, rates)
    res = look(metric, res, 50, 0, rates)
    assert [r.index for r in res.restarts] == [1]
    assert len(res.restarts) <= KEPT_RESTARTS


def test_a_healthy_canary_is_failed_at_most_alpha_however_many_looks() -> None:
    """Monte Carlo of the code under test (the bound itself is Ville's, module doc): a canary
    failing exactly ``p0`` of its requests, looked at every 5 requests for 1,000 requests (200
    looks, a restart at each), with α = 0.1 so that a breach would show. The count of runs
    failed must be consistent with a rate ≤ α: the 99.9 % Clopper-Pearson lower bound stays at
    or under α. (Measured: 13 of 400. Weights that sum past 1, 0.05 per restart, fail 83 of
    400, a lower bound of 0.15.)"""
    rates = sq.ErrorRates(alpha=0.1, beta=0.1)
    p0, runs, looks, per_look = 0.05, 400, 200, 5
    metric = error_rate(max=p0)
    rng = random.Random(30)
    failed_runs = 0
    for _ in range(runs):
        res, n, bad = None, 0, 0
        for _ in range(looks):
            n += per_look
            bad += sum(rng.random() < p0 for _ in range(per_look))
            res = look(metric, res, n, bad, rates)
            if res.verdict == "Fail":
                failed_runs += 1
                break
    lower = stats.beta.ppf(0.001, failed_runs, runs - failed_runs + 1) if failed_runs else 0.0
    assert lower <= rates.alpha, (failed_runs, runs)
