"""A tiny run of bench/verdicts.py, so the benchmark keeps running against the real verdict
code, and its three targets hold at this size too."""

from __future__ import annotations

import math

import numpy as np
from bench import verdicts as bench


def test_histogram_quantile_matches_prometheus_interpolation() -> None:
    counts = np.zeros(len(bench.TTFT_BOUNDS) + 1)
    counts[bench.TTFT_BOUNDS.index(0.25)] = 99  # (0.1, 0.25]
    counts[bench.TTFT_BOUNDS.index(0.5)] = 1  # (0.25, 0.5]
    assert math.isclose(bench.histogram_quantile(0.99, counts), 0.25)
    counts[bench.TTFT_BOUNDS.index(0.5)] = 3
    # rank 0.99 × 102 = 100.98: 1.98 of the 3 in (0.25, 0.5] → 0.25 + 0.25 × 0.66
    assert math.isclose(bench.histogram_quantile(0.99, counts), 0.25 + 0.25 * 1.98 / 3)


def test_the_latency_distributions_have_the_stated_share_over_the_limit() -> None:
    over_bound = bench.TTFT_BOUNDS.index(0.5) + 1  # buckets above 0.5: surely over 0.45
    for share in bench.OVER_SHARES[:-1]:
        probs = bench.latency_buckets(share)
        assert math.isclose(probs.sum(), 1.0)
        surely = probs[over_bound:].sum()
        assert 0.9 * share < surely <= share  # a few over-limit requests sit in (0.45, 0.5]
    assert bench.latency_buckets(1.0)[over_bound:].sum() == 1.0


def test_a_small_run_meets_the_targets() -> None:
    assert bench.requests_to_fail_all_over() == 2  # the mixture (issue 30): its 2nd request
    healthy = bench.cell("Sequential", 2.0, 0.005, True, 200, 60.0, 4 * 3600.0, seed=3)
    assert healthy.rolled_back <= 2 and healthy.promoted >= 198
    bad = bench.cell("Sequential", 0.5, 0.05, True, 200, 60.0, 4 * 3600.0, seed=4)
    assert bad.promoted == 0
    errors = bench.cell("Sequential", 10.0, 0.05, False, 200, 60.0, 4 * 3600.0, seed=5)
    assert errors.promoted == 0
    # the Window rule at the same traffic: what the issue reported (never a verdict at 0.1/s)
    window = bench.cell("Window", 0.1, 1.0, True, 20, 60.0, 600.0, seed=6)
    assert window.no_verdict == 20
