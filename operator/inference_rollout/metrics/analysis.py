"""Measure every analysis metric once: canary (and stable, for relative checks), plus sample guard.

Only measuring happens here; verdicts are the pure core's job.  Each metric becomes one
:class:`Measurement` whose ``error`` is None (a usable value), TOO_FEW_SAMPLES (inconclusive) or
one of the error kinds.  All queries of one analysis run concurrently and are evaluated at the
same instant, so canary and stable are compared over exactly the same window.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ..api.duration import parse_duration
from ..api.spec import MetricSpec
from ..core.types import Measurement, MeasurementError
from .promql import PlaceholderError, Revision, format_window, substitute
from .source import MetricQueryError, MetricSource, NoData
from .templates import _REQUESTS, TEMPLATES

#: A rate() window must hold several scrapes to be stable; 4 × the scrape interval is
#: Prometheus' and Grafana's ($__rate_interval) rule of thumb.  Shorter windows are raised to it.
SCRAPE_INTERVALS_PER_WINDOW = 4

Outcome = float | MetricQueryError


@dataclass(frozen=True)
class Queries:
    """The PromQL for one metric and one revision."""

    value: str
    samples: str | None


def window_seconds(metric: MetricSpec, interval_s: float, scrape_interval_s: float) -> int:
    """``metric.window`` or the analysis interval, in whole seconds, ≥ 4 scrape intervals."""
    wanted = parse_duration(metric.window) if metric.window else interval_s
    return max(1, round(wanted), round(SCRAPE_INTERVALS_PER_WINDOW * scrape_interval_s))


def build_queries(metric: MetricSpec, rev: Revision, window: str, min_samples: int) -> Queries:
    """The value and sample-guard queries of ``metric`` for ``rev``.

    Custom queries get the request-count guard only when they set ``minSamples`` themselves: the
    analysis-wide default exists for the request-based templates, and a custom query may measure
    something that is not per request.  Raises :class:`PlaceholderError` for unknown placeholders.
    """
    sel = rev.selector
    if metric.template is not None:
        t = TEMPLATES[metric.template]
        samples = t.samples(sel, window) if t.samples and min_samples > 0 else None
        return Queries(t.value(sel, window), samples)
    assert metric.query is not None  # MetricSpec guarantees exactly one of template/query
    guard = metric.min_samples is not None and metric.min_samples > 0
    return Queries(substitute(metric.query, rev, window), _REQUESTS(sel, window) if guard else None)


async def measure(
    source: MetricSource,
    namespace: str,
    rollout: str,
    canary_rev: str,
    stable_rev: str | None,
    metrics: list[MetricSpec],
    interval_s: float,
    default_min_samples: int,
    *,
    scrape_interval_s: float = 30.0,
    at: float | None = None,
) -> dict[str, Measurement]:
    """Measure ``metrics`` for the canary revision (and the stable one where a metric is
    relative).  Never raises for Prometheus trouble: that is reported per metric."""
    at = time.time() if at is None else at
    revs = {"canary": Revision(namespace, rollout, canary_rev)}
    if stable_rev is not None:
        revs["stable"] = Revision(namespace, rollout, stable_rev)

    plans: dict[str, dict[str, Queries]] = {}
    early: dict[str, Measurement] = {}
    for m in metrics:
        sides = ["canary", "stable"] if m.is_relative() else ["canary"]
        if "stable" in sides and stable_rev is None:
            early[m.name] = Measurement(
                None, error=MeasurementError.NO_DATA, detail="no stable revision to compare with"
            )
            continue
        window = format_window(window_seconds(m, interval_s, scrape_interval_s))
        min_samples = default_min_samples if m.min_samples is None else m.min_samples
        try:
            plans[m.name] = {s: build_queries(m, revs[s], window, min_samples) for s in sides}
        except PlaceholderError as e:
            early[m.name] = Measurement(None, error=MeasurementError.BAD_QUERY, detail=str(e))

    # One flat gather: every query of every metric in flight at once (the source caps
    # concurrency and applies its timeout to each).
    keys = [
        (name, side, kind)
        for name, sides in plans.items()
        for side, q in sides.items()
        for kind in ("value", "samples")
        if kind == "value" or q.samples is not None
    ]
    texts = [getattr(plans[n][s], k) for n, s, k in keys]
    results = await asyncio.gather(*(_run(source, q, at) for q in texts))
    outcomes = dict(zip(keys, results, strict=True))

    out: dict[str, Measurement] = {}
    for m in metrics:
        if m.name in early:
            out[m.name] = early[m.name]
            continue
        min_samples = default_min_samples if m.min_samples is None else m.min_samples
        window = format_window(window_seconds(m, interval_s, scrape_interval_s))
        out[m.name] = _combine(
            {s: outcomes[(m.name, s, "value")] for s in plans[m.name]},
            {s: outcomes[(m.name, s, "samples")] for s in plans[m.name]
             if (m.name, s, "samples") in outcomes},
            min_samples,
            window,
        )
    return out


async def _run(source: MetricSource, promql: str, at: float) -> Outcome:
    try:
        return await source.query(promql, at)
    except MetricQueryError as e:
        return e


def _combine(
    values: dict[str, Outcome], samples: dict[str, Outcome], min_samples: int, window: str
) -> Measurement:
    """One Measurement from the outcomes of one metric's queries.

    Precedence: a query Prometheus rejected or could not answer is an error whatever else came
    back; then a side with no series at all (not scraped, wrong labels: surfaced as NoData so a
    broken selector is an error, not a silent "quiet"); then too few samples (a quiet window is
    inconclusive, not an error, so a 5% stage does not trip the consecutive-error limit); then a
    value that is still missing.  ``samples`` is the smaller of canary's and stable's, so either
    side being too quiet makes a relative check inconclusive.
    """
    outcomes = [*values.items(), *samples.items()]
    for kind in (MeasurementError.BAD_QUERY, MeasurementError.UNREACHABLE):
        for side, o in outcomes:
            if isinstance(o, MetricQueryError) and o.kind is kind:
                return Measurement(None, error=kind, detail=f"{side}: {o.message}")

    def num(o: Outcome | None) -> float | None:
        return float(o) if isinstance(o, int | float) else None

    canary, stable = num(values.get("canary")), num(values.get("stable"))
    count: float | None = None
    if samples:
        # An absent counter series in a window where the revision exists = nothing counted.
        side, count = min(((s, num(o) or 0.0) for s, o in samples.items()), key=lambda x: x[1])
    for s, o in values.items():
        if isinstance(o, NoData) and (s not in samples or isinstance(samples[s], NoData)):
            return Measurement(canary, stable, count, MeasurementError.NO_DATA, f"{s}: {o.message}")
    if count is not None and count < min_samples:
        return Measurement(
            canary, stable, count, MeasurementError.TOO_FEW_SAMPLES,
            f"{side}: {count:.0f} requests in {window} < minSamples {min_samples}",
        )
    for s, o in values.items():
        if isinstance(o, NoData):
            return Measurement(canary, stable, count, MeasurementError.NO_DATA, f"{s}: {o.message}")
    return Measurement(canary, stable, count, None, f"window {window}")
