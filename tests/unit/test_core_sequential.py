"""The sequential tests' maths, checked against exact binomial probabilities (scipy) and by
exact dynamic programming over every path a release's counts can take.

What must hold (core/sequential.py): a healthy canary (bad share ≤ p0) is failed with
probability ≤ α *however often it is looked at*; a bad one (share ≥ p1 = 5·p0) passes with
probability ≤ β; every request bad fails at its 2nd request (3rd when 5 % may fail).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from inference_rollout.core import sequential as sq

DEFAULT = sq.error_rates(0.01, metrics=3, steps=4)  # 3 SLO metrics, the 4 default steps


def test_defaults_split_the_release_rate_over_metrics_and_steps() -> None:
    assert DEFAULT.alpha == pytest.approx(0.01 / 12)
    assert DEFAULT.beta == 0.01


@pytest.mark.parametrize(("p0", "within"), [(0.01, 2), (0.001, 2), (0.05, 3)])
@pytest.mark.parametrize("metrics", [1, 3, 5])
def test_every_request_bad_fails_at_the_second_or_third(p0: float, within: int,
                                                       metrics: int) -> None:
    """Issue 30: against p1 = 5·p0 alone it took 5 (ln 5 per bad request against ln(1/α)); the
    mixture's gross alternatives (×50 and ×95 per bad request at p0 = 1%) take 2, or 3 at 5%."""
    rates = sq.error_rates(0.01, metrics=metrics, steps=4)
    verdicts = [sq.bernoulli(n, n, n, p0, rates).verdict for n in range(1, within + 1)]
    assert verdicts == ["Inconclusive"] * (within - 1) + ["Fail"]


def test_one_bad_request_alone_never_fails_a_canary() -> None:
    """Whatever the share: one bad answer can come from a healthy canary (p ≤ 1/α·p0 is
    not evidence enough), so the physical limit is the second."""
    for p0 in (0.001, 0.01, 0.05, 0.2):
        assert sq.bernoulli(1, 1, 1, p0, DEFAULT).verdict == "Inconclusive"


def test_the_mixture_weights_sum_to_one_and_keep_the_5x_alternative() -> None:
    # a mixture of likelihood ratios with weights summing to 1 is a supermartingale at 1 under
    # the null: Ville's bound is the same α (the exact DP below checks it)
    for p0 in (0.001, 0.01, 0.05, 0.3, 0.6):
        assert sq.log_mixture_lr(0, 0, p0) == pytest.approx(0.0)  # M starts at 1
    # near 5·p0 the mixture costs at most ln 2 against the single alternative
    for n, k in ((200, 10), (1000, 40)):
        single = sq.log_lr(k, n, 0.01, sq.alternative(0.01))
        assert single - math.log(2) <= sq.log_mixture_lr(k, n, 0.01) + 1e-9


def _boundary(n_max: int, p0: float, verdict: str) -> np.ndarray:
    """Per n, which bad counts give ``verdict``: Fail from some k up, Pass up to some k (both
    sides are monotone in k, so bisect for the edge)."""
    out = np.zeros((n_max + 1, n_max + 2), dtype=bool)
    for n in range(1, n_max + 1):
        def gives(k: int, n: int = n) -> bool:
            return sq.bernoulli(n, k, k, p0, DEFAULT).verdict == verdict
        lo, hi = 0, n + 1  # Fail: first k that fails; Pass: first k that no longer passes
        while lo < hi:
            mid = (lo + hi) // 2
            if gives(mid) == (verdict == "Fail"):
                hi = mid
            else:
                lo = mid + 1
        if verdict == "Fail":
            out[n, lo:n + 1] = True
        else:
            out[n, :lo] = True
    return out


def _probability_of_crossing(p: float, p0: float, n_max: int, fail: bool) -> float:
    """Exact P(the test ever reaches Fail (or Pass) within n_max requests | true share p),
    looking after every request: dynamic programming over the number of bad requests."""
    decided = _boundary(n_max, p0, "Fail" if fail else "Pass")
    alive = np.zeros(n_max + 2)
    alive[0] = 1.0
    crossed = 0.0
    for n in range(1, n_max + 1):
        nxt = alive * (1 - p)
        nxt[1:] += alive[:-1] * p
        crossed += nxt[decided[n]].sum()
        nxt[decided[n]] = 0
        alive = nxt
    return float(crossed)


@pytest.mark.parametrize("p0", [0.01, 0.05])
def test_a_healthy_canary_is_failed_at_most_alpha_of_the_time_looking_after_every_request(
        p0: float) -> None:
    assert _probability_of_crossing(p0, p0, 1500, fail=True) <= DEFAULT.alpha


@pytest.mark.parametrize("p0", [0.01, 0.05])
def test_a_bad_canary_passes_at_most_beta_of_the_time(p0: float) -> None:
    p1 = sq.alternative(p0)
    assert _probability_of_crossing(p1, p0, 1500, fail=False) <= DEFAULT.beta


def test_a_healthy_canary_passes_and_a_bad_one_fails_eventually() -> None:
    # Far from the limits both sides decide almost surely within a few thousand requests.
    assert _probability_of_crossing(0.002, 0.01, 1500, fail=False) > 0.99
    assert _probability_of_crossing(0.2, 0.01, 300, fail=True) > 0.99


def test_the_fail_boundary_is_stricter_than_a_one_shot_binomial_test() -> None:
    """At any fixed n, the smallest failing count has a binomial tail ≤ α (Ville is the
    stronger, any-time statement)."""
    for n in (5, 20, 100, 1000):
        k = next(k for k in range(n + 1)
                 if sq.bernoulli(n, k, k, 0.01, DEFAULT).verdict == "Fail")
        assert stats.binom.sf(k - 1, n, 0.01) <= DEFAULT.alpha


def test_passing_needs_enough_requests_and_says_how_many_more() -> None:
    o = sq.bernoulli(40, 0, 0, 0.01, DEFAULT)
    assert o.verdict == "Inconclusive"
    needed = math.log(1 / DEFAULT.beta) / math.log(0.99 / 0.95)  # 111.7 clean requests
    assert o.more_requests == math.ceil(needed) - 40
    assert sq.bernoulli(40 + o.more_requests, 0, 0, 0.01, DEFAULT).verdict == "Pass"
    assert sq.bernoulli(39 + o.more_requests, 0, 0, 0.01, DEFAULT).verdict == "Inconclusive"


def test_fractional_counts_round_against_the_verdict_they_would_support() -> None:
    # 1.8 sure exceedances count as 1 toward Fail (2 would fail)...
    assert sq.bernoulli(1.8, 1.8, 1.8, 0.01, DEFAULT).verdict == "Inconclusive"
    assert sq.bernoulli(2.0000001, 1.9999999, 2, 0.01, DEFAULT).verdict == "Fail"
    # ...and 0.2 possible exceedances count as 1 toward Pass, 112.7 requests as 112.
    assert sq.bernoulli(112.7, 0, 0, 0.01, DEFAULT).verdict == "Pass"
    assert sq.bernoulli(112.7, 0, 0.2, 0.01, DEFAULT).verdict == "Inconclusive"


VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)


def _cumulative(latencies: list[float]) -> tuple[tuple[float, float], ...]:
    return tuple((b, float(sum(x <= b for x in latencies))) for b in (*VLLM_TTFT, math.inf))


def test_exceedances_between_bounds_count_surely_above_and_possibly_above() -> None:
    lat = [0.05] * 90 + [0.3] * 5 + [0.48] * 2 + [0.9] * 3
    # L = 0.45 sits in (0.25, 0.5]: surely above = above 0.5; possibly above = above 0.25.
    assert sq.exceedances(_cumulative(lat), 0.45) == (100, 3, 10)
    # L on a bound: both are the same count.
    assert sq.exceedances(_cumulative(lat), 0.5) == (100, 3, 3)
    # L below the smallest bound: every request is possibly above, none surely (> 0.001).
    assert sq.exceedances(_cumulative(lat), 0.0005) == (100, 100, 100)
    # L above the largest finite bound: nothing is surely above.
    assert sq.exceedances(_cumulative([7.0] * 4), 6.0) == (4, 0, 4)


def test_exceedances_clamp_extrapolated_buckets() -> None:
    # increase() extrapolates each bucket alone: a lower bucket may exceed a higher one.
    total, surely, possibly = sq.exceedances(((0.25, 10.4), (0.5, 10.1), (math.inf, 10.2)), 0.45)
    assert (total, possibly) == (10.2, 0.0) and surely == pytest.approx(0.1)


def test_the_two_sample_test_fails_a_canary_with_the_errors_and_not_an_equal_one() -> None:
    # 5% canary: 100 requests, 12 errors there, stable 1900 requests with 1 error.
    assert sq.two_sample(100, 12, 1900, 1, 1.5, DEFAULT).verdict == "Fail"
    assert sq.two_sample(100, 11, 1900, 1, 1.5, DEFAULT).verdict == "Inconclusive"
    # the same error share on both sides never fails, however much evidence
    assert sq.two_sample(5000, 50, 95000, 950, 1.5, DEFAULT).verdict == "Inconclusive"
    assert sq.two_sample(50, 0, 950, 0, 1.5, DEFAULT).verdict == "Inconclusive"


def test_the_two_sample_false_failure_rate_holds_under_the_null() -> None:
    """Canary's errors at exactly max_ratio × stable's share: simulated, fails ≤ α + noise."""
    rng = np.random.default_rng(7)
    fails = 0
    trials = 4000
    for _ in range(trials):
        n_c, n_s = rng.poisson(300), rng.poisson(5700)
        k_c, k_s = rng.binomial(n_c, 0.015), rng.binomial(n_s, 0.01)  # ratio 1.5 = the limit
        fails += sq.two_sample(n_c, k_c, n_s, k_s, 1.5, sq.ErrorRates(0.01, 0.01)).verdict == "Fail"
    # 0.01 at most, with a 3-sigma allowance for sampling
    assert fails / trials <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / trials)


def test_huge_counts_neither_overflow_nor_lose_the_verdict() -> None:
    # a busy canary over a long step: 10 million clean requests (ln LR ≈ -400000)
    assert sq.bernoulli(1e7, 0, 0, 0.01, DEFAULT) == sq.Outcome("Pass", 10**7, 0, 1.0, 0)
    assert sq.bernoulli(1e7, 1e6, 1e6, 0.01, DEFAULT).verdict == "Fail"
    assert sq.two_sample(1e7, 0, 1e8, 1e5, 1.5, DEFAULT).verdict == "Inconclusive"
    assert sq.two_sample(1e7, 1, 1e8, 1e5, 1.5, DEFAULT).p_value == 1.0


# --- properties over arbitrary counts ------------------------------------------------------------

COUNTS = st.floats(0, 1e9, allow_nan=False)
SHARES = st.floats(1e-6, 0.999, allow_nan=False)


@given(COUNTS, COUNTS, COUNTS, SHARES)
def test_any_counts_give_a_verdict_and_more_bad_never_helps(n: float, a: float, b: float,
                                                            p0: float) -> None:
    sure, possible = sorted((min(a, n), min(b, n)))
    o = sq.bernoulli(n, sure, possible, p0, DEFAULT)
    assert o.verdict in ("Pass", "Fail", "Inconclusive") and 0 <= o.p_value <= 1
    worse = sq.bernoulli(n + 1, sure + 1, possible + 1, p0, DEFAULT)  # one more bad request
    better = sq.bernoulli(n + 1, sure, possible, p0, DEFAULT)  # one more good request
    assert o.verdict != "Fail" or worse.verdict == "Fail"
    assert worse.verdict != "Pass" or o.verdict == "Pass"
    assert o.verdict != "Pass" or better.verdict == "Pass"
    assert better.verdict != "Fail" or o.verdict == "Fail"


@given(st.lists(st.tuples(st.floats(1e-4, 1e4), COUNTS), max_size=30), SHARES.map(lambda x: x * 5))
def test_any_histogram_splits_into_consistent_counts(pairs: list[tuple[float, float]],
                                                     limit: float) -> None:
    bounds = sorted({b for b, _ in pairs})
    counts = sorted(c for _, c in pairs)[:len(bounds)]
    buckets = (*zip(bounds, counts, strict=True), (math.inf, counts[-1] if counts else 0.0))
    total, sure, possible = sq.exceedances(buckets, limit)
    assert 0 <= sure <= possible <= total
    sq.bernoulli(total, sure, possible, 0.01, DEFAULT)  # never raises
