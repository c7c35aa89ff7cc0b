"""Analysis verdicts: one threshold check for every metric, and the counters that act on it.

Three outcomes per measurement (DESIGN §4): Pass, Fail, and Error/Inconclusive.  Only Fail counts
toward a rollback; Error and Inconclusive never promote, and too many Errors in a row follow the
spec's policy.  A relative check compares the canary with the stable measured in the same window.

Under the Sequential rule (``analysis.verdicts``) a measurement carries the counts accumulated
over the step, and the ``max`` of a latency or error-rate template is decided by a sequential
test (:mod:`.sequential`) instead of by the value; docs/metrics.md explains the maths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from ..api.duration import format_duration
from ..api.effective import effective_metrics, slo_metrics
from ..api.spec import ERROR_RATE_TEMPLATES, AnalysisSpec, MetricSpec, Step
from ..api.status import KEPT_RESTARTS, CarriedCounts, MetricResult, RestartPoint, Verdict
from . import sequential as sq
from .timeutil import to_iso
from .types import Measurement, MeasurementError

__all__ = ["effective_metrics", "slo_metrics"]  # re-exported: verdicts and queries share one list

#: Histogram templates whose ``max`` is a p99 limit, tested by counting exceedances.
LATENCY_TEMPLATES = frozenset({"ttft-p99", "itl-p99", "e2e-p99", "probe-ttft-p99"})

def describe_threshold(metric: MetricSpec) -> str:
    parts = []
    if metric.max is not None:
        parts.append(f"≤ {metric.max:g}")
    if metric.min is not None:
        parts.append(f"≥ {metric.min:g}")
    if metric.max_ratio_to_stable is not None:
        parts.append(f"≤ {metric.max_ratio_to_stable:g}× stable")
    if metric.min_ratio_to_stable is not None:
        parts.append(f"≥ {metric.min_ratio_to_stable:g}× stable")
    return ", ".join(parts)


VANISHED = "the canary's series vanished while it carried traffic"

#: Prometheus applies the targets its service discovery finds in batches (every 5 s) and starts
#: their scrape loops on a tick of its own (5 s): a pod started now is first scraped up to
#: ~10 s later (9 s measured on the sandbox), and ``rate()`` needs a second scrape after that.
DISCOVERY_SECONDS = 10.0


def first_scrapes_seconds(metric: MetricSpec, scrape_interval_s: float) -> float:
    """How long after a canary's weight is in force its pods may still have no series at all:
    discovery, two scrapes, and the metric's warm-up."""
    return DISCOVERY_SECONDS + 2 * scrape_interval_s + metric.warmup_seconds


def collecting(held_s: float | None, grace_s: float) -> str:
    """Why a NoData of the canary in the first seconds of its weight is Inconclusive."""
    since = "not in force yet" if held_s is None else f"in force for {held_s:.0f}s"
    return (f"collecting: no canary series yet (its weight is {since}; Prometheus discovers and "
            f"scrapes new pods within {grace_s:.0f}s)")


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    why: str
    test: sq.Outcome | None = None  # the sequential test behind the verdict, if one ran
    test_text: str | None = None
    #: The step's (requests, surely bad) that test counted, and its p0: where a later look
    #: restarts from.
    counts: tuple[float, float, float] | None = None


def judge(metric: MetricSpec, m: Measurement, rates: sq.ErrorRates | None = None,
          restarts: tuple[sq.Restart, ...] = (), carried: sq.Carried = sq.NOTHING_CARRIED,
          exposure: float = 1.0) -> Judgement:
    """The verdict of one measurement against one metric's thresholds.

    With ``rates`` (the Sequential rule) and evidence counted, the ``max`` of a latency or
    error-rate template is decided by a sequential test (:mod:`.sequential`); every other
    threshold by comparing the point estimate over the same period.  The verdict is Fail if any
    part fails, Pass if all pass, else Inconclusive.  ``restarts``: the step's earlier looks the
    sequential test also counts from (late breakage); ``carried`` and ``exposure``: the
    release's earlier steps and the weight a pass hands on (:func:`.sequential.bernoulli`).
    """
    if m.error is not None and m.error is not MeasurementError.TOO_FEW_SAMPLES:
        return Judgement("Error", _why(m.error, m.detail))
    seq = (_sequential(metric, m, rates, restarts, carried, exposure) if rates is not None
           else None)
    if seq is not None and seq.covers_all:
        return Judgement(seq.outcome.verdict, seq.text, seq.outcome, seq.text, seq.counts)
    point = _point(metric, m, skip_max=seq is not None and seq.covers_max)
    if seq is None:
        return point
    parts = [point, Judgement(seq.outcome.verdict, seq.text)]
    verdict: Verdict = ("Fail" if any(p.verdict == "Fail" for p in parts) else
                        "Pass" if all(p.verdict == "Pass" for p in parts) else "Inconclusive")
    return Judgement(verdict, "; ".join(p.why for p in parts), seq.outcome, seq.text,
                     seq.counts)


def _point(metric: MetricSpec, m: Measurement, skip_max: bool = False) -> Judgement:
    """The point estimate against the thresholds (the Window rule, and non-count metrics)."""
    if m.error is MeasurementError.TOO_FEW_SAMPLES:
        if m.samples is None and m.detail:  # not counted at all yet (the step's first scrapes)
            return Judgement("Inconclusive", m.detail)
        return Judgement("Inconclusive", f"too few samples ({m.samples or 0:g})")
    if m.value is None:
        return Judgement("Error", _why(MeasurementError.NO_DATA, m.detail))
    breaches = []
    if metric.max is not None and not skip_max and m.value > metric.max:
        breaches.append(f"{m.value:g} > {metric.max:g}")
    if metric.min is not None and m.value < metric.min:
        breaches.append(f"{m.value:g} < {metric.min:g}")
    if metric.is_relative():
        if m.stable_value is None:
            return Judgement("Error", "no stable value to compare with")
        if not math.isfinite(m.stable_value):
            # Stable off the histogram's scale: no ratio means anything (+Inf vs +Inf, 5 vs +Inf).
            return Judgement("Inconclusive", f"stable is {m.stable_value:g}, ratio undefined")
        if m.stable_value == 0:
            # A ratio to zero says nothing: equal zeros pass, anything else is undecidable.
            if m.value == 0:
                return Judgement("Pass", "canary and stable both 0")
            return Judgement("Inconclusive", "stable is 0, ratio undefined")
        ratio = m.value / m.stable_value
        if metric.max_ratio_to_stable is not None and ratio > metric.max_ratio_to_stable:
            breaches.append(f"{ratio:.3f}× stable > {metric.max_ratio_to_stable:g}×")
        if metric.min_ratio_to_stable is not None and ratio < metric.min_ratio_to_stable:
            breaches.append(f"{ratio:.3f}× stable < {metric.min_ratio_to_stable:g}×")
    if breaches:
        return Judgement("Fail", "; ".join(breaches))
    return Judgement("Pass", f"{m.value:g} {describe_threshold(metric)}")


@dataclass(frozen=True)
class _Sequential:
    outcome: sq.Outcome
    text: str
    covers_max: bool  # the test decides the metric's ``max``
    covers_all: bool  # … and the metric has no other threshold
    counts: tuple[float, float, float] | None = None  # (requests, surely bad, p0): restartable


def counts_requests(metric: MetricSpec) -> bool:
    """Whether the metric's ``max`` is decided by counting bad requests (:func:`.sequential.
    bernoulli`): a latency template's p99, or an error rate's testable limit."""
    if metric.template in LATENCY_TEMPLATES:
        return metric.max is not None
    return (metric.template in ERROR_RATE_TEMPLATES and metric.max is not None
            and sq.testable(metric.max))


def _sequential(metric: MetricSpec, m: Measurement, rates: sq.ErrorRates,
                restarts: tuple[sq.Restart, ...] = (), carried: sq.Carried = sq.NOTHING_CARRIED,
                exposure: float = 1.0) -> _Sequential | None:
    """The sequential test for this metric's counts, or None when it has none."""
    ev = m.evidence
    if ev is None or metric.template is None:
        return None
    others = metric.min is not None or metric.min_ratio_to_stable is not None
    if metric.template in LATENCY_TEMPLATES and ev.buckets and metric.max is not None:
        requests, sure, possible = sq.exceedances(ev.buckets, metric.max)
        o = sq.bernoulli(requests, sure, possible, sq.P99_EXCEEDANCE, rates, restarts, carried,
                         exposure)
        what = f"over {metric.max:g} s"
        return _Sequential(o, _test_text(o, what), True, not others and not metric.is_relative(),
                           (requests, sure, sq.P99_EXCEEDANCE))
    if metric.template not in ERROR_RATE_TEMPLATES or ev.requests is None or ev.errors is None:
        return None
    if metric.max is not None and sq.testable(metric.max):
        o = sq.bernoulli(ev.requests, ev.errors, ev.errors, metric.max, rates, restarts,
                         carried, exposure)
        return _Sequential(o, _test_text(o, "failed"), True,
                           not others and not metric.is_relative(),
                           (ev.requests, ev.errors, metric.max))
    if (metric.max_ratio_to_stable is not None and ev.stable_requests is not None
            and ev.stable_errors is not None):
        o = sq.two_sample(ev.requests, ev.errors, ev.stable_requests, ev.stable_errors,
                          metric.max_ratio_to_stable, rates)
        return _Sequential(o, _test_text(o, f"failed (stable {ev.stable_errors:.0f}/"
                                            f"{ev.stable_requests:.0f})"), False, False)
    return None


def _test_text(o: sq.Outcome, what: str) -> str:
    """``5/5 over 0.45 s, p < 0.001: Fail``; ``≤ 2/300 …: Pass``; ``… : Inconclusive (≥ 60 more
    requests to pass)``."""
    counted = f"{o.bad}/{o.requests} {what}" if o.verdict == "Fail" else (
        f"≤ {o.bad}/{o.requests} {what}")
    if o.since_look is not None:
        counted += f" since look {o.since_look} of the step"
    elif o.carried.requests and o.verdict != "Fail":
        counted += (f" this step, ≤ {o.bad + o.carried.bad}/{o.requests + o.carried.requests} "
                    "this release")
    tail = f" (≥ {o.more_requests} more requests to pass)" if o.more_requests else ""
    return f"{counted}, {sq.describe_p(o.p_value)}: {o.verdict}{tail}"


def record(
    metric: MetricSpec, previous: MetricResult | None, m: Measurement, now: datetime,
    rates: sq.ErrorRates | None = None, *, vanished: bool = False, unscraped: str = "",
    step: str | None = None, exposure: float = 1.0,
) -> MetricResult:
    """The metric's new status entry: the latest values and verdict, and updated counters.
    ``vanished``: the canary's series were measured in this step and are gone although its
    Ready pods still carry traffic, which counts as failing (DESIGN §4), not as an error.
    ``unscraped``: why no series yet is expected (:func:`collecting`): Inconclusive, not an
    error that counts toward ``consecutiveErrorLimit``.  ``step``: the step the evidence counts
    from (its ``stepStartedAt``); the restart points belong to it and no other.  ``exposure``:
    the weight a pass hands the canary, over 100 (:func:`pass_exposure`)."""
    prev = previous or MetricResult()
    kept = prev.restarts if step is not None and prev.restart_step == step else []
    carried = _carried(metric, prev, step)
    if vanished:
        j = Judgement("Fail", VANISHED, None, VANISHED)
    elif unscraped and m.error is MeasurementError.NO_DATA:
        j = Judgement("Inconclusive", unscraped)
    else:
        j = judge(metric, m, rates, tuple(sq.Restart(r.index, r.requests, r.bad_requests)
                                          for r in kept),
                  sq.NOTHING_CARRIED if carried is None else sq.Carried(carried.requests,
                                                                   carried.bad_requests),
                  exposure)
    ev = m.evidence
    counted = None if ev is None else ev.buckets[-1][1] if ev.buckets else ev.requests
    rate = (counted / ev.period_s if j.test is not None and ev is not None and counted is not None
            and ev.period_s > 0 else None)
    return MetricResult(
        value=m.value,
        stable_value=m.stable_value,
        threshold=describe_threshold(metric),
        verdict=j.verdict,
        samples=m.samples,
        error=None if j.verdict in ("Pass", "Fail") else j.why,
        measured_at=to_iso(now),
        consecutive_failures=prev.consecutive_failures + 1 if j.verdict == "Fail" else 0,
        consecutive_errors=prev.consecutive_errors + 1 if j.verdict == "Error" else 0,
        passes=prev.passes + 1 if j.verdict == "Pass" else prev.passes,
        requests=None if j.test is None else j.test.requests,
        bad_requests=None if j.test is None else j.test.bad,
        test=j.test_text,
        requests_to_verdict=None if j.test is None else j.test.more_requests,
        request_rate=None if rate is None else round(rate, 4),
        restarts=_restart_here(kept, j.counts) if step is not None else [],
        restart_step=step,
        carried=carried,
    )


def _carried(metric: MetricSpec, prev: MetricResult, step: str | None) -> CarriedCounts | None:
    """The release's earlier step periods' pass-side counts, with the previous look's when it
    was the last of a period (``step`` moved on since).  Each period is added once: the look
    that ends one starts the next period's (or, between steps, a look with no step).

    A period whose last verdict was Fail adds its requests as all bad (its counts were the fail
    side's: bad ones rounded down), and a changed threshold starts from nothing: the counts
    were of another limit."""
    if not counts_requests(metric) or prev.threshold != describe_threshold(metric):
        return None
    before = prev.carried
    if prev.restart_step is None or prev.restart_step == step or prev.requests is None:
        return before
    n = int(prev.requests)
    bad = n if prev.verdict == "Fail" else min(n, int(prev.bad_requests or 0))
    base = before or CarriedCounts(requests=0, bad_requests=0)
    return CarriedCounts(requests=base.requests + n, bad_requests=base.bad_requests + bad)


def pass_exposure(steps: list[Step], index: int | None) -> float:
    """The weight, over 100, that passing step ``index`` hands the canary: the next step's, or
    :data:`.sequential.PROMOTION_EXPOSURE` for the promotion after the last (all traffic, from
    then on).  The pass side asks for that share of its evidence (:func:`.sequential.bernoulli`)."""
    if index is None or index + 1 >= len(steps):
        return sq.PROMOTION_EXPOSURE
    return steps[index + 1].weight / 100


def _restart_here(kept: list[RestartPoint], counts: tuple[float, float, float] | None
                  ) -> list[RestartPoint]:
    """The restart points after this look: this look's counts become the next one when
    requests arrived since the last (a restart with nothing new would spend weight on the same
    evidence twice). Of those, the :data:`KEPT_RESTARTS` whose components weigh most now are
    kept (any choice keeps the error bound: sequential.py), in the order of the looks."""
    last = max(kept, key=lambda r: r.index, default=None)
    if counts is None or counts[0] <= (last.requests if last else 0.0) + sq.SLACK:
        return kept
    requests, sure, p0 = counts
    here = RestartPoint(index=last.index + 1 if last else 1, requests=requests,
                        bad_requests=sure)

    def weight_now(r: RestartPoint) -> float:
        return sq.restart_evidence(sq.Restart(r.index, r.requests, r.bad_requests),
                                   requests, sure, p0)

    heaviest = sorted([*kept, here], key=weight_now, reverse=True)[:KEPT_RESTARTS]
    return sorted(heaviest, key=lambda r: r.index)


def rates_for(analysis: AnalysisSpec, steps: int) -> sq.ErrorRates | None:
    """The sequential tests' per-test error rates, or None under the Window rule."""
    if analysis.verdicts != "Sequential":
        return None
    return sq.error_rates(analysis.false_rollback_rate, len(analysis.effective_metrics), steps)


def failed(analysis: AnalysisSpec, results: dict[str, MetricResult]) -> list[str]:
    """Names of metrics whose failures exceed the tolerated ``failureLimit``."""
    return sorted(n for n, r in results.items() if r.consecutive_failures > analysis.failure_limit)


def erroring(analysis: AnalysisSpec, results: dict[str, MetricResult]) -> list[str]:
    """Names of metrics that could not be measured ``consecutiveErrorLimit`` times in a row."""
    limit = analysis.consecutive_error_limit
    return sorted(n for n, r in results.items() if r.consecutive_errors >= limit)


def still_needed(results: dict[str, MetricResult], names: list[str]) -> str:
    """``slo-ttft-p99 needs ≥ 140 more canary requests (about 23m at 0.1/s)`` for each of
    ``names``, so a person knows whether waiting can help."""
    parts = []
    for n in names:
        res = results.get(n)
        more = res.requests_to_verdict if res is not None else None
        if res is None:
            parts.append(f"{n} not measured yet")
        elif not more:
            parts.append(f"{n} {res.verdict}: {res.error or 'no count-based test'}")
        elif res.request_rate:
            parts.append(f"{n} needs ≥ {more} more canary requests (about "
                         f"{format_duration(more / res.request_rate)} at "
                         f"{res.request_rate:.3g}/s)")
        else:
            parts.append(f"{n} needs ≥ {more} more canary requests (none arrive now)")
    return "; ".join(parts)


def _why(error: MeasurementError, detail: str) -> str:
    """``Unreachable: connection refused`` (the kind alone without a detail)."""
    return f"{error.value}: {detail}" if detail else error.value


def summarise(results: dict[str, MetricResult], names: list[str]) -> str:
    """``ttft-p99 0.21 ≤ 0.45; error-rate 0.002 ≤ 0.01`` for messages and Events, with the
    sequential test's state where one ran (``slo-ttft-p99 0.9 (Fail: ≤ 0.45; 5/5 over 0.45 s,
    p < 0.001: Fail)``) and, for an Error, why (``errors n/a (Error: ≤ 0.01; NoData: …)``)."""
    parts = []
    for n in names:
        r = results.get(n)
        if r is None:
            continue
        shown = "n/a" if r.value is None else f"{r.value:.4g}"
        parts.append(f"{n} {shown} ({r.verdict}: {judged_against(r)})")
    return "; ".join(parts)


def judged_against(r: MetricResult) -> str:
    """The threshold, the sequential test's state, and for an Error why it could not be
    measured: a pause for errors in a row must say what failed (a calibration run paused on
    ``n/a (Error: ≤ 0.01)`` alone, and the reason was gone from the status by the next look)."""
    test = f"; {r.test}" if r.test else ""
    why = f"; {r.error}" if r.verdict == "Error" and r.error else ""
    return f"{r.threshold}{test}{why}"
