"""Measure every analysis metric once: canary (and stable, for relative checks), plus sample guard.

Only measuring happens here; verdicts are the pure core's job.  Each metric becomes one
:class:`Measurement` whose ``error`` is None (a usable value), TOO_FEW_SAMPLES (inconclusive) or
one of the error kinds.  All queries of one analysis run concurrently and are evaluated at the
same instant, so canary and stable are compared over exactly the same window.

Under the Sequential rule (``since`` given) that window is the step's evidence period, and the
templates with counts also return them (:class:`Evidence`: a histogram's buckets, the error
rate's errors and requests) for the core's sequential tests.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..api.spec import ERROR_RATE_TEMPLATES, GATEWAY_TEMPLATES, MetricSpec
from ..core.types import Evidence, Measurement, MeasurementError
from . import gateway_templates as gw
from .promql import PlaceholderError, Revision, format_window, substitute
from .source import MetricQueryError, MetricSource, NoData
from .templates import _REQUESTS, ERROR_PARTS, TEMPLATES

#: A rate() window must hold several scrapes to be stable; 4 × the scrape interval is
#: Prometheus' and Grafana's ($__rate_interval) rule of thumb.  Shorter windows are raised to it.
SCRAPE_INTERVALS_PER_WINDOW = 4

Outcome = float | dict[str, float] | MetricQueryError


#: The Sequential rule queries a step's evidence once it spans this many scrapes.
EVIDENCE_MIN_SCRAPES = 2


@dataclass(frozen=True)
class Queries:
    """The PromQL for one metric and one revision."""

    value: str
    samples: str | None
    evidence: str | None = None  # the Sequential rule's counts, a vector by evidence_label
    evidence_label: str = ""


def window_seconds(metric: MetricSpec, interval_s: float, scrape_interval_s: float) -> int:
    """``metric.window`` or the analysis interval, in whole seconds, ≥ 4 scrape intervals."""
    wanted = metric.window_seconds or interval_s
    return max(1, round(wanted), round(SCRAPE_INTERVALS_PER_WINDOW * scrape_interval_s))


def build_queries(metric: MetricSpec, rev: Revision, window: str, min_samples: int,
                  counts: bool = False, weight: int | None = None) -> Queries:
    """The value and sample-guard queries of ``metric`` for ``rev`` (and, with ``counts``, the
    template's evidence query for the sequential tests).  ``weight``: the canary's weight in
    force, which ``gateway-traffic-share`` compares the gateway's split with.

    Custom queries get the request-count guard only when they set ``minSamples`` themselves: the
    analysis-wide default exists for the request-based templates, and a custom query may measure
    something that is not per request.  Raises :class:`PlaceholderError` for unknown placeholders.
    """
    sel = rev.selector
    if metric.template in GATEWAY_TEMPLATES:
        return _gateway_queries(metric, rev, window, min_samples, counts, weight)
    if metric.template is not None:
        t = TEMPLATES[metric.template]
        samples = t.samples(sel, window) if t.samples and min_samples > 0 else None
        if counts and t.evidence is not None:
            return Queries(t.value(sel, window), samples, t.evidence(sel, window),
                           t.evidence_label)
        return Queries(t.value(sel, window), samples)
    assert metric.query is not None  # MetricSpec guarantees exactly one of template/query
    guard = metric.min_samples is not None and metric.min_samples > 0
    return Queries(substitute(metric.query, rev, window), _REQUESTS(sel, window) if guard else None)


def _gateway_queries(metric: MetricSpec, rev: Revision, window: str, min_samples: int,
                     counts: bool, weight: int | None) -> Queries:
    gateway = metric.gateway or gw.DEFAULT_GATEWAY
    if metric.template == gw.GATEWAY_ERROR_RATE:
        samples = gw.requests(gateway, rev, window) if min_samples > 0 else None
        if counts:
            return Queries(gw.error_rate(gateway, rev, window), samples,
                           gw.error_counts(gateway, rev, window), "part")
        return Queries(gw.error_rate(gateway, rev, window), samples)
    if weight is None:
        raise ValueError("gateway-traffic-share needs the canary's weight in force")
    return Queries(gw.traffic_share_error(gateway, rev, window, weight),
                   gw.rollout_requests(gateway, rev, window) if min_samples > 0 else None)


def _share_not_comparable(at: float, span: int, weight: int | None,
                          weight_since: float | None) -> Measurement | None:
    """``gateway-traffic-share`` compares the gateway's split with ONE weight: a window that
    reaches back before that weight was in force (or no weight in force yet: the gateway has
    not accepted the route) measures a mix of two weights, and says nothing (Inconclusive)."""
    if weight is None or weight_since is None:
        detail = "the canary's weight is not in force at the gateway yet"
    elif at - span < weight_since:
        detail = (f"the window ({span}s) reaches back before the canary's {weight}% was in "
                  f"force ({max(0, round(at - weight_since))}s ago)")
    else:
        return None
    return Measurement(None, error=MeasurementError.TOO_FEW_SAMPLES, detail=detail)


async def measure(
    source: MetricSource,
    namespace: str,
    rollout: str,
    canary_rev: str,
    stable_rev: str | None,
    metrics: Sequence[MetricSpec],
    interval_s: float,
    default_min_samples: int,
    *,
    scrape_interval_s: float = 30.0,
    at: float | None = None,
    since: float | None = None,
    weight: int | None = None,
    weight_since: float | None = None,
    gateway_source: MetricSource | None = None,
    pods: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, Measurement]:
    """Measure ``metrics`` for the canary revision (and the stable one where a metric is
    relative).  Never raises for Prometheus trouble: that is reported per metric.

    ``since`` (unix seconds; the Sequential rule): when the step's weight was reached.  Every
    query then spans ``[since + warmup, at]`` instead of the last window, and templates with
    counts also return them (:class:`Evidence`) for the sequential tests.  ``weight`` and
    ``weight_since``: the canary's weight in force and since when (for any rule), which
    ``gateway-traffic-share`` compares the gateway's split with.

    ``gateway_source`` (default ``source``) serves the ``gateway-*`` templates: the gateway's
    counters carry the gateway's namespace, not the rollout's, so the reconciler passes the same
    Prometheus without namespace confinement (:func:`.tenancy.unconfined`). Those queries are the
    operator's own, selecting only this rollout's Services by validated names.

    ``pods``: revision → its pods by name, for a rollout with adapters (``Revision.pods``).
    """
    at = time.time() if at is None else at
    gateway_source = source if gateway_source is None else gateway_source
    gateway_metrics = {m.name for m in metrics if m.template in GATEWAY_TEMPLATES}
    named = pods or {}
    revs = {"canary": Revision(namespace, rollout, canary_rev, named.get(canary_rev))}
    if stable_rev is not None:
        revs["stable"] = Revision(namespace, rollout, stable_rev, named.get(stable_rev))

    plans: dict[str, dict[str, Queries]] = {}
    windows: dict[str, int] = {}
    early: dict[str, Measurement] = {}
    for m in metrics:
        sides = ["canary", "stable"] if m.is_relative() else ["canary"]
        if "stable" in sides and stable_rev is None:
            early[m.name] = Measurement(
                None, error=MeasurementError.NO_DATA, detail="no stable revision to compare with"
            )
            continue
        span = _span(m, interval_s, scrape_interval_s, at, since)
        if isinstance(span, Measurement):
            early[m.name] = span
            continue
        if m.template == gw.GATEWAY_TRAFFIC_SHARE:
            blind = _share_not_comparable(at, span, weight, weight_since)
            if blind is not None:
                early[m.name] = blind
                continue
        windows[m.name] = span
        window = format_window(span)
        min_samples = default_min_samples if m.min_samples is None else m.min_samples
        try:
            # Counts of the stable too only where a two-sample test uses them (error rates).
            plans[m.name] = {s: build_queries(m, revs[s], window, min_samples, since is not None
                                              and (s == "canary"
                                                   or m.template in ERROR_RATE_TEMPLATES),
                                              weight)
                             for s in sides}
        except PlaceholderError as e:
            early[m.name] = Measurement(None, error=MeasurementError.BAD_QUERY, detail=str(e))

    # One flat gather: every query of every metric in flight at once (the source caps
    # concurrency and applies its timeout to each).
    keys = [
        (name, side, kind)
        for name, sides in plans.items()
        for side, q in sides.items()
        for kind in ("value", "samples", "evidence")
        if kind == "value" or getattr(q, kind) is not None
    ]
    results = await asyncio.gather(*(
        _run(gateway_source if n in gateway_metrics else source, plans[n][s], k, at)
        for n, s, k in keys))
    outcomes = dict(zip(keys, results, strict=True))

    out: dict[str, Measurement] = {}
    for m in metrics:
        if m.name in early:
            out[m.name] = early[m.name]
            continue
        min_samples = default_min_samples if m.min_samples is None else m.min_samples

        def side_outcomes(kind: str, name: str = m.name) -> dict[str, Outcome]:
            return {s: outcomes[(name, s, kind)] for s in plans[name]
                    if (name, s, kind) in outcomes}

        measured = _combine(side_outcomes("value"), side_outcomes("samples"), min_samples,
                            format_window(windows[m.name]))
        out[m.name] = with_evidence(measured, side_outcomes("evidence"), windows[m.name])
    await _served_nothing_yet(source, metrics, plans, outcomes, revs, out, at)
    return out


def _unseen_sides(name: str, plans: dict[str, dict[str, Queries]],
                  outcomes: dict[tuple[str, str, str], Outcome]) -> list[str]:
    """The sides of a request-counted metric with no series at all (value and count)."""
    return [side for side, q in plans[name].items()
            if q.samples is not None and isinstance(outcomes.get((name, side, "value")), NoData)
            and isinstance(outcomes.get((name, side, "samples")), NoData)]


async def _served_nothing_yet(source: MetricSource, metrics: Sequence[MetricSpec],
                              plans: dict[str, dict[str, Queries]],
                              outcomes: dict[tuple[str, str, str], Outcome],
                              revs: dict[str, Revision], out: dict[str, Measurement],
                              at: float) -> None:
    """A built-in request metric with no series: NoData means a broken selector or unscraped
    pods (an error), unless the side's pods are scraped (``up``) and simply have served no
    request yet, which is a window without evidence (TooFewSamples, 0 requests).

    Why: a server that creates its labelled series at its first request (the sandbox's
    simulator; vLLM creates them at start, at 0) shows a 5 % canary at low traffic, whose first
    request can take tens of seconds, as NoData, and four such looks in a row paused releases
    (AnalysisErrorLimit) in the 0.2 req/s calibration.  One ``up`` query per side, only then."""
    unseen = {m.name: _unseen_sides(m.name, plans, outcomes) for m in metrics
              if m.name in plans and m.template is not None
              and m.template not in GATEWAY_TEMPLATES
              and out[m.name].error is MeasurementError.NO_DATA}
    unseen = {name: sides for name, sides in unseen.items() if sides}
    sides = sorted({s for ss in unseen.values() for s in ss})
    if not sides:
        return
    ups = await asyncio.gather(*(_run(source, Queries(f"max(up{{{revs[s].selector}}})", None),
                                      "value", at) for s in sides))
    scraped = {s for s, up in zip(sides, ups, strict=True)
               if isinstance(up, int | float) and up >= 1}
    for name, missing in unseen.items():
        if set(missing) <= scraped:
            m = out[name]
            out[name] = Measurement(m.value, m.stable_value, 0.0,
                                    MeasurementError.TOO_FEW_SAMPLES,
                                    f"{missing[0]}: its pods are scraped but have served no "
                                    "request yet (no request series)")


def _span(metric: MetricSpec, interval_s: float, scrape_interval_s: float, at: float,
          since: float | None) -> int | Measurement:
    """The seconds every query of ``metric`` spans, or an Inconclusive measurement while the
    step's evidence period is too short to query (``increase()`` needs two scrapes in range)."""
    if since is None:
        return window_seconds(metric, interval_s, scrape_interval_s)
    warmup = metric.warmup_seconds
    period = at - (since + warmup)
    if period < EVIDENCE_MIN_SCRAPES * scrape_interval_s:
        what = "warming up" if period < 0 else "collecting"
        return Measurement(None, error=MeasurementError.TOO_FEW_SAMPLES, detail=(
            f"{what}: evidence counts from {format_window(round(warmup))} after the step's "
            f"weight and needs {EVIDENCE_MIN_SCRAPES} scrapes"))
    return max(1, math.floor(period))


async def _run(source: MetricSource, queries: Queries, kind: str, at: float) -> Outcome:
    try:
        if kind == "evidence":
            assert queries.evidence is not None
            return await source.query_vector(queries.evidence, queries.evidence_label, at)
        promql = getattr(queries, kind)
        return await source.query(promql, at)
    except MetricQueryError as e:
        return e


def with_evidence(m: Measurement, evidence: dict[str, Outcome], period_s: int) -> Measurement:
    """``m`` with the counts of its evidence queries attached.

    A query error there is the metric's error (as for its value), unless the metric already
    has one; no counts (an empty vector: no series yet) leave the point comparison to decide.
    """
    if not evidence or (m.error is not None
                        and m.error is not MeasurementError.TOO_FEW_SAMPLES):
        return m
    for side, o in evidence.items():
        if isinstance(o, MetricQueryError) and not isinstance(o, NoData):
            return replace(m, error=o.kind, detail=f"{side} counts: {o.message}")
    canary = evidence.get("canary")
    if not isinstance(canary, dict):
        return m
    stable = evidence.get("stable")
    if _is_histogram(canary):
        return replace(m, evidence=Evidence(period_s, buckets=_cumulative(canary)))
    requests, errors = _error_view(canary)
    stable_counts = _error_view(stable) if isinstance(stable, dict) else (None, None)
    return replace(m, evidence=Evidence(period_s, requests=requests, errors=errors,
                                        stable_requests=stable_counts[0],
                                        stable_errors=stable_counts[1]))


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


def _is_histogram(counts: dict[str, float]) -> bool:
    return not set(counts) & set(ERROR_PARTS)


def _finite(x: float | None) -> float:
    return x if x is not None and math.isfinite(x) else 0.0


def _cumulative(by_le: dict[str, float]) -> tuple[tuple[float, float], ...]:
    """``{le: count}`` → ascending ``(bound, count)`` pairs ending at ``inf``."""
    pairs = sorted((float(le), _finite(c)) for le, c in by_le.items())
    if not pairs or pairs[-1][0] != math.inf:
        pairs.append((math.inf, max((c for _, c in pairs), default=0.0)))
    return tuple(pairs)


def _error_view(parts: dict[str, float]) -> tuple[float | None, float | None]:
    """(requests, errors) of the view with the larger error share, as the error-rate's value
    takes the larger of the engine and HTTP views.  A view without requests does not count."""
    views = []
    for view in ("engine", "http"):
        requests = _finite(parts.get(f"{view}_requests"))
        if requests > 0:
            errors = min(requests, _finite(parts.get(f"{view}_errors")))
            views.append((errors / requests, requests, errors))
    if not views:
        return (0.0, 0.0) if parts else (None, None)
    _, requests, errors = max(views)
    return requests, errors
