"""Verdicts at low traffic: thousands of simulated releases through the operator's real verdict
code (``core.analysis.judge`` with ``core.sequential``), the Sequential rule beside the Window
rule.  Pure: no cluster, no Prometheus.  docs/benchmarks.md has the method and the table.

Per cell (canary request rate × share of requests over the limit, or × error rate) it runs N
releases of 4 steps with ``pause: 0s`` (a step ends on its metric's first Pass) and a look every
``interval``.  Each look draws the interval's requests (Poisson), their latencies into vLLM's
real TTFT histogram buckets (multinomial) or their errors (binomial), and asks the verdict code:

* Sequential: the counts since the step's weight was reached (cumulative buckets, ``Evidence``);
* Window: the last interval's requests only, ``minSamples`` 20, the p99 estimated from the
  window's buckets as ``histogram_quantile`` does (linear inside the bucket).

A Fail rolls back (``failureLimit`` 0); a step without a verdict after ``--step-limit`` counts
as "no verdict".  ``python bench/verdicts.py --releases 1000`` (``make bench-verdicts``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from inference_rollout.api.spec import AnalysisSpec, MetricSpec, Step  # noqa: E402
from inference_rollout.core import verdicts as an  # noqa: E402
from inference_rollout.core.timeutil import to_iso  # noqa: E402
from inference_rollout.core.types import Evidence, Measurement, MeasurementError  # noqa: E402

#: vLLM V1's ``vllm:time_to_first_token_seconds`` bucket bounds (vllm/v1/metrics/loggers.py).
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
LIMIT = 0.45  # SLO ttftP99 300ms × factor 1.5: between the bounds 0.25 and 0.5, as users set it
STEPS = 4
MIN_SAMPLES = 20
RATES = (0.1, 0.5, 2.0, 10.0)
OVER_SHARES = (0.005, 0.02, 0.05, 0.2, 1.0)
ERROR_SHARES = (0.005, 0.02, 0.05)
ERROR_MAX = 0.01

#: The spec whose per-test error rates the bench uses: the 3 SLO metrics and an error rate
#: (16 tests over 4 steps); the table simulates one of them at a time, the others pass.
SPEC = AnalysisSpec.model_validate({
    "prometheus": {"address": "http://prometheus:9090"},
    "slo": {"ttftP99": "300ms", "itlP99": "50ms", "e2eP99": "10s"},
    "metrics": [{"name": "errors", "template": "error-rate", "max": ERROR_MAX}]})
RATES_SEQUENTIAL = an.rates_for(SPEC, STEPS)
STAGES = [Step(weight=w) for w in (5, 20, 50, 100)]
TTFT = next(m for m in an.effective_metrics(SPEC) if m.name == "slo-ttft-p99")
ERRORS = MetricSpec(name="errors", template="error-rate", max=ERROR_MAX)
NOW = datetime(2026, 12, 6, tzinfo=UTC)


def step_key(index: int) -> str:
    """The step's ``stepStartedAt`` as the status holds it (a moment: the CRD's pattern)."""
    return to_iso(NOW + timedelta(hours=index))


def latency_buckets(over: float) -> np.ndarray:
    """Probabilities of each bucket (the last is +Inf) when ``over`` of requests exceed LIMIT.

    Requests within the limit: lognormal, median 80 ms, σ 0.45, cut at LIMIT (0.6% of them land
    in (0.25, 0.45], the limit's bucket, which the pass side counts as possibly over).  Requests
    over it: lognormal, median 0.9 s, σ 0.5, cut below at LIMIT (4% land in (0.45, 0.5], which
    the fail side cannot count).  ``over == 1``: every request at 0.9 s, far over the limit.
    """
    edges = np.array((0.0, *TTFT_BOUNDS, math.inf))
    if over >= 1:
        cdf = (edges >= 0.9).astype(float)
        return np.diff(cdf)
    fast = stats.lognorm(s=0.45, scale=0.08)
    slow = stats.lognorm(s=0.5, scale=0.9)
    fast_cdf = np.minimum(fast.cdf(edges) / fast.cdf(LIMIT), 1.0)
    slow_cdf = np.clip((slow.cdf(edges) - slow.cdf(LIMIT)) / slow.sf(LIMIT), 0.0, 1.0)
    return np.diff((1 - over) * fast_cdf + over * slow_cdf)


def histogram_quantile(q: float, counts: np.ndarray) -> float:
    """Prometheus' ``histogram_quantile`` over per-bucket counts (linear inside a bucket)."""
    cumulative = np.cumsum(counts)
    total = cumulative[-1]
    rank = q * total
    i = int(np.searchsorted(cumulative, rank))
    if i >= len(TTFT_BOUNDS):
        return TTFT_BOUNDS[-1]  # in the +Inf bucket: Prometheus answers the largest bound
    lower = 0.0 if i == 0 else TTFT_BOUNDS[i - 1]
    below = 0.0 if i == 0 else cumulative[i - 1]
    inside = counts[i]
    return lower + (TTFT_BOUNDS[i] - lower) * ((rank - below) / inside if inside else 1.0)


def latency_evidence(counts: np.ndarray, period: float) -> Evidence:
    """The step's per-bucket counts as the Sequential rule reads them: cumulative, by bound."""
    bounds = (*TTFT_BOUNDS, math.inf)
    return Evidence(period, buckets=tuple(zip(bounds, np.cumsum(counts).astype(float).tolist(),
                                              strict=True)))


class StepCounts:
    """One step's counts as its requests arrive, for the Sequential rule's evidence: the latency
    buckets (``probs``: :func:`latency_buckets`) or requests and errors (``share`` failing)."""

    def __init__(self, probs: np.ndarray | None, share: float) -> None:
        self.probs, self.share = probs, share
        self.hist = np.zeros(len(TTFT_BOUNDS) + 1, dtype=np.int64)
        self.total = self.errors = 0

    def add(self, rng: np.random.Generator, n: int) -> np.ndarray | int:
        """Draw ``n`` more requests; the look's own draws (bucket counts, or errors)."""
        if self.probs is not None:
            window = rng.multinomial(n, self.probs)
            self.hist += window
            return window
        bad = int(rng.binomial(n, self.share))
        self.total, self.errors = self.total + n, self.errors + bad
        return bad

    def counts(self) -> np.ndarray | tuple[int, int]:
        return self.hist if self.probs is not None else (self.total, self.errors)

    def evidence(self, period: float) -> Evidence:
        if self.probs is not None:
            return latency_evidence(self.hist, period)
        return Evidence(period, requests=self.total, errors=self.errors)


@dataclass
class Release:
    outcome: str  # promoted | rolled back | no verdict
    seconds: float
    requests: int


def look(rule: str, metric: MetricSpec, requests: int, bad: np.ndarray | int,
         step_counts: np.ndarray | tuple[int, int], period: float) -> str:
    """One analysis: the verdict of the real code on this look's measurement."""
    if metric is TTFT:
        assert isinstance(bad, np.ndarray) and isinstance(step_counts, np.ndarray)
        if rule == "Sequential":
            m = Measurement(None, evidence=latency_evidence(step_counts, period))
            return an.judge(metric, m, RATES_SEQUENTIAL).verdict
        window = bad  # this interval's bucket counts
        if requests < MIN_SAMPLES:
            return "Inconclusive"
        return an.judge(metric, Measurement(histogram_quantile(0.99, window),
                                            samples=requests)).verdict
    assert isinstance(step_counts, tuple)
    if rule == "Sequential":
        total, errors = step_counts
        m = Measurement(None, evidence=Evidence(period, requests=total, errors=errors))
        return an.judge(metric, m, RATES_SEQUENTIAL).verdict
    if requests < MIN_SAMPLES:
        return "Inconclusive"
    assert isinstance(bad, int)
    m = Measurement(bad / requests, samples=requests,
                    error=None if requests else MeasurementError.TOO_FEW_SAMPLES)
    return an.judge(metric, m).verdict


def release(rng: np.random.Generator, rule: str, rate: float, share: float, latency: bool,
            interval: float, step_limit: float) -> Release:
    """One release.  Sequential looks go through ``record`` as ``decide`` makes them: the
    release's evidence carried from step to step, each step asking for the share of it that the
    weight it hands on needs (steps 5/20/50/100 %: issue 30, item 3)."""
    probs = latency_buckets(share) if latency else None
    metric = TTFT if latency else ERRORS
    t, seen = 0.0, 0
    prev = None
    for index in range(STEPS):
        step_t = 0.0
        step = StepCounts(probs, share)
        while True:
            if step_t >= step_limit:
                return Release("no verdict", t, seen)
            step_t += interval
            t += interval
            n = int(rng.poisson(rate * interval))
            seen += n
            window_bad = step.add(rng, n)
            verdict: str
            if rule == "Sequential":
                prev = an.record(metric, prev, Measurement(None, evidence=step.evidence(step_t)),
                                 NOW, RATES_SEQUENTIAL, step=step_key(index),
                                 exposure=an.pass_exposure(STAGES, index))
                verdict = prev.verdict or "Inconclusive"
            else:
                verdict = look(rule, metric, n, window_bad, step.counts(), step_t)
            if verdict == "Fail":
                return Release("rolled back", t, seen)
            if verdict == "Pass":
                break
    return Release("promoted", t, seen)


@dataclass(frozen=True)
class Cell:
    """One row of the table: N releases of one rule at one rate and one bad share."""

    rule: str
    rate: float
    share: float
    kind: str  # latency | errors
    releases: int
    rolled_back: int
    promoted: int
    no_verdict: int
    median_s: float
    p95_s: float
    median_requests: float
    p95_requests: float


def cell(rule: str, rate: float, share: float, latency: bool, releases: int, interval: float,
         step_limit: float, seed: int) -> Cell:
    rng = np.random.default_rng(seed)
    runs = [release(rng, rule, rate, share, latency, interval, step_limit)
            for _ in range(releases)]
    decided = [r for r in runs if r.outcome != "no verdict"]
    secs = np.array([r.seconds for r in decided] or [math.nan])
    reqs = np.array([float(r.requests) for r in decided] or [math.nan])
    return Cell(rule, rate, share, "latency" if latency else "errors", releases,
                sum(r.outcome == "rolled back" for r in runs),
                sum(r.outcome == "promoted" for r in runs),
                sum(r.outcome == "no verdict" for r in runs),
                float(np.median(secs)), float(np.percentile(secs, 95)),
                float(np.median(reqs)), float(np.percentile(reqs, 95)))


def late_breakage(rng: np.random.Generator, rate: float, interval: float, good: int,
                  restarts: bool, kind: str) -> int:
    """One step held long: ``good`` good requests, then every request bad (TTFT at 0.9 s, or
    failed); the bad requests answered until the look that rolls back.  ``restarts``: the
    verdict code's record() with the step's restart points (the default), else the whole-step
    test alone (judge on the step's counts, as before issue 30 item 2)."""
    latency = kind == "latency"
    metric = TTFT if latency else ERRORS
    probs_good, probs_bad = latency_buckets(0.0), latency_buckets(1.0)
    hist = np.zeros(len(TTFT_BOUNDS) + 1, dtype=np.int64)
    total = errors = bad_served = 0
    prev = None
    t = 0.0
    while bad_served < 100_000:
        t += interval
        n = int(rng.poisson(rate * interval))
        n_good = max(0, min(n, good - total))
        n_bad = n - n_good
        total, bad_served = total + n, bad_served + n_bad
        if latency:
            hist += rng.multinomial(n_good, probs_good) + rng.multinomial(n_bad, probs_bad)
            ev = latency_evidence(hist, t)
        else:
            errors += n_bad
            ev = Evidence(t, requests=total, errors=errors)
        m = Measurement(None, evidence=ev)
        if restarts:
            prev = an.record(metric, prev, m, NOW, RATES_SEQUENTIAL, step=step_key(0))
            verdict = prev.verdict
        else:
            verdict = an.judge(metric, m, RATES_SEQUENTIAL).verdict
        if verdict == "Fail":
            return bad_served
    raise AssertionError("never rolled back")


@dataclass(frozen=True)
class LateCell:
    """One late-breakage cell: the bad requests each release served until its rollback."""

    kind: str  # latency | errors
    rate: float
    interval: float
    good: int
    restarts: bool
    served: list[int]


def late_cells(releases: int, seed: int) -> list[LateCell]:
    """Each cell with the restarts (the default) and with the whole-step test alone, on the
    same draws (the same seed), so the two columns differ only by the rule."""
    out = []
    for kind in ("latency", "errors"):
        for rate, interval in ((2.0, 5.0), (10.0, 1.0), (10.0, 5.0)):
            for restarts in (True, False):
                rng = np.random.default_rng(seed)
                out.append(LateCell(kind, rate, interval, 10_000, restarts,
                                    [late_breakage(rng, rate, interval, 10_000, restarts, kind)
                                     for _ in range(releases)]))
    return out


def late_table(cells: list[LateCell]) -> str:
    """Bad requests served after a late breakage, median / p95 / max per cell."""
    lines = ["| metric | canary req/s | look every | good requests first | restarts (default) "
             "| whole-step test alone |", "|---|---|---|---|---|---|"]
    for with_restarts, alone in zip(cells[::2], cells[1::2], strict=True):
        shown = [f"{np.median(c.served):.0f} / {np.percentile(c.served, 95):.0f} / "
                 f"{max(c.served)}" for c in (with_restarts, alone)]
        c = with_restarts
        lines.append(f"| {'TTFT p99' if c.kind == 'latency' else 'errors ≤ 1%'} | {c.rate:g} | "
                     f"{c.interval:g} s | {c.good:,} | {shown[0]} | {shown[1]} |")
    return "\n".join(lines)


def requests_to_fail_all_over() -> int:
    """Looking after every request, how many requests at 0.9 s the test needs to roll back."""
    counts = np.zeros(len(TTFT_BOUNDS) + 1, dtype=np.int64)
    probs = latency_buckets(1.0)
    for n in range(1, 50):
        counts[int(np.argmax(probs))] += 1
        if look("Sequential", TTFT, n, counts, counts, float(n)) == "Fail":
            return n
    raise AssertionError("never failed")


def fmt_time(s: float) -> str:
    if math.isnan(s):
        return "–"
    return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"


def table(rows: list[Cell]) -> str:
    lines = ["| rule | canary req/s | bad share | releases | rolled back | promoted | no verdict "
             "| time to verdict: median / p95 | canary requests: median / p95 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in rows:
        kind = "over L" if c.kind == "latency" else "errors"
        share = [f"{100 * k / c.releases:.1f}%" for k in (c.rolled_back, c.promoted, c.no_verdict)]
        reqs = ("–" if math.isnan(c.median_requests)
                else f"{c.median_requests:.0f} / {c.p95_requests:.0f}")
        lines.append(f"| {c.rule} | {c.rate:g} | {100 * c.share:g}% {kind} | {c.releases} | "
                     f"{' | '.join(share)} | {fmt_time(c.median_s)} / {fmt_time(c.p95_s)} | "
                     f"{reqs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--releases", type=int, default=1000, help="releases per cell")
    p.add_argument("--interval", type=float, default=60.0, help="analysis interval, seconds")
    p.add_argument("--step-limit", type=float, default=4 * 3600.0,
                   help="seconds a step may stay undecided before counting as no verdict")
    p.add_argument("--json", type=Path, help="also write the rows here")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--late-releases", type=int, default=200,
                   help="releases per late-breakage cell")
    p.add_argument("--late-only", action="store_true", help="only the late-breakage table")
    p.add_argument("--late-json", type=Path,
                   help="also write the late-breakage cells, every release's count, here")
    p.add_argument("--table-from", type=Path,
                   help="print the tables of files --json and --late-json wrote (no simulation)")
    args = p.parse_args(argv)
    assert RATES_SEQUENTIAL is not None
    if args.table_from:
        print(table([Cell(**d) for d in json.loads(args.table_from.read_text())]))
        if args.late_json:
            print(late_table([LateCell(**d) for d in json.loads(args.late_json.read_text())]))
        return 0
    started = time.monotonic()
    late = late_cells(args.late_releases, args.seed)
    if args.late_only:
        print(late_table(late))
        print(f"({time.monotonic() - started:.0f} s)")
        if args.late_json:
            args.late_json.write_text(json.dumps([asdict(c) for c in late]))
        return 0
    rows = []
    cells = [(s, True) for s in OVER_SHARES] + [(s, False) for s in ERROR_SHARES]
    for i, (share, latency) in enumerate(cells):
        for j, rate in enumerate(RATES):
            for rule in ("Sequential", "Window"):
                rows.append(cell(rule, rate, share, latency, args.releases, args.interval,
                                 args.step_limit, args.seed + 100 * i + j))
    print(f"Sequential: α per test {RATES_SEQUENTIAL.alpha:.2e} (falseRollbackRate 0.01 over "
          f"{len(an.effective_metrics(SPEC))} metrics × {STEPS} steps), β {RATES_SEQUENTIAL.beta}; "
          f"L = {LIMIT} s; interval {args.interval:g} s; a step undecided after "
          f"{fmt_time(args.step_limit)} counts as no verdict")
    print(f"every request at 0.9 s, looking after every request: rolled back at request "
          f"{requests_to_fail_all_over()}")
    print(table(rows))
    print("\nLate breakage: bad requests served until the rollback, median / p95 / max over "
          f"{args.late_releases} releases")
    print(late_table(late))
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in rows], indent=1))
    if args.late_json:
        args.late_json.write_text(json.dumps([asdict(c) for c in late]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
