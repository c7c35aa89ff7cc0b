"""A tiny run of bench/release_evidence.py: the benchmark keeps running against the real
``record`` (the function ``decide`` calls at every look), its kept file prints the same table,
and the issue's targets hold at this size too (issue 30, item 3)."""

from __future__ import annotations

import numpy as np
from bench import release_evidence as bench


def releases(share: float, latency: bool, carry: bool, n: int = 40,
             rate: float = 4.0) -> list[bench.Outcome]:
    rng = np.random.default_rng(7)
    return [bench.release(rng, rate, share, latency, 30.0, carry) for _ in range(n)]


def test_a_healthy_release_at_4_rps_goes_through_in_minutes_and_faster_than_step_by_step() -> None:
    today = releases(0.0, True, carry=True)
    before = releases(0.0, True, carry=False)
    assert all(r.outcome == "promoted" for r in today + before)
    # 5/20/50/100 % with 30 s holds, 0.2 canary req/s at 5 %: the 8 minutes
    assert np.median([r.seconds for r in today]) <= 8 * 60
    assert np.median([r.seconds for r in today]) < np.median([r.seconds for r in before]) / 2


def test_a_canary_whose_every_request_fails_never_gets_past_its_first_step() -> None:
    for r in releases(1.0, False, carry=True):
        assert (r.outcome, r.weight_reached) == ("rolled back", 5)


def test_a_canary_at_five_times_the_limit_is_never_promoted() -> None:
    assert not any(r.outcome == "promoted" for r in releases(0.05, False, carry=True, n=60))


def test_the_kept_file_reads_back_as_the_same_table() -> None:
    cell = bench.Cell("errors", 4.0, 0.002, True, releases(0.002, False, carry=True, n=10))
    assert bench.summary(bench.from_raw(bench.raw(cell))) == bench.summary(cell)
