"""Analysis verdicts: one threshold check for every metric, and the counters that act on it.

Three outcomes per measurement (DESIGN §4): Pass, Fail, and Error/Inconclusive.  Only Fail counts
toward a rollback; Error and Inconclusive never promote, and too many Errors in a row follow the
spec's policy.  A relative check compares the canary with the stable measured in the same window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..api.effective import effective_metrics, slo_metrics
from ..api.spec import AnalysisSpec, MetricSpec
from ..api.status import MetricResult, Verdict
from .timeutil import to_iso
from .types import Measurement, MeasurementError

__all__ = ["effective_metrics", "slo_metrics"]  # re-exported: verdicts and queries share one list

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


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    why: str


def judge(metric: MetricSpec, m: Measurement) -> Judgement:
    """The verdict of one measurement against one metric's thresholds."""
    if m.error is MeasurementError.TOO_FEW_SAMPLES:
        return Judgement("Inconclusive", f"too few samples ({m.samples or 0:g})")
    if m.error is not None or m.value is None:
        kind = (m.error or MeasurementError.NO_DATA).value
        return Judgement("Error", f"{kind} {m.detail}".strip())
    breaches = []
    if metric.max is not None and m.value > metric.max:
        breaches.append(f"{m.value:g} > {metric.max:g}")
    if metric.min is not None and m.value < metric.min:
        breaches.append(f"{m.value:g} < {metric.min:g}")
    if metric.is_relative():
        if m.stable_value is None:
            return Judgement("Error", "no stable value to compare with")
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


def record(
    metric: MetricSpec, previous: MetricResult | None, m: Measurement, now: datetime
) -> MetricResult:
    """The metric's new status entry: the latest values and verdict, and updated counters."""
    j = judge(metric, m)
    prev = previous or MetricResult()
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
    )


def failed(analysis: AnalysisSpec, results: dict[str, MetricResult]) -> list[str]:
    """Names of metrics whose failures exceed the tolerated ``failureLimit``."""
    return sorted(n for n, r in results.items() if r.consecutive_failures > analysis.failure_limit)


def erroring(analysis: AnalysisSpec, results: dict[str, MetricResult]) -> list[str]:
    """Names of metrics that could not be measured ``consecutiveErrorLimit`` times in a row."""
    limit = analysis.consecutive_error_limit
    return sorted(n for n, r in results.items() if r.consecutive_errors >= limit)


def summarise(results: dict[str, MetricResult], names: list[str]) -> str:
    """``ttft-p99 0.21 ≤ 0.45; error-rate 0.002 ≤ 0.01`` for messages and Events."""
    parts = []
    for n in names:
        r = results.get(n)
        if r is None:
            continue
        shown = "n/a" if r.value is None else f"{r.value:.4g}"
        parts.append(f"{n} {shown} ({r.verdict}: {r.threshold})")
    return "; ".join(parts)
