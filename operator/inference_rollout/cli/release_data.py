"""What ``kubectl inference-rollout report`` shows, gathered from the cluster and Prometheus.

The report reads only what the operator already publishes -- the rollout (spec and status), its
Events, and the operator's own series in Prometheus (``inference_rollout_canary_weight`` and
``inference_rollout_analysis_value``, the values its verdicts were reached on) -- so it shows
what the operator saw and decided, never a recomputation of it.  Prometheus is read with
``prometheus-api-client`` range queries over the release's window; without those series (a
Prometheus that does not scrape the operator) the weights come from the ``StepWeightSet``
Events and the metrics from the ``AnalysisVerdict`` Events, which record each verdict change.

Which release: the one whose ``NewRelease`` Event names ``--release REV`` (default: the latest
one), from that Event until it was promoted, rolled back or replaced: one release per page, with
only its own Events (issue 33).  ``--since``/``--until`` set where that release is looked for
(Events live about an hour in a default cluster); only when no ``NewRelease`` Event is in that
window does the page cover the window itself, and it says so.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..api import reasons as r
from ..api.effective import effective_metrics
from ..api.spec import InferenceRolloutSpec, MetricSpec

Point = tuple[datetime, float]

#: Events that end a release, and the outcome they stand for (the words of the status' phase and
#: Events: what a reviewer already knows).
PROMOTED, ROLLED_BACK, IN_PROGRESS, REPLACED = "Promoted", "RolledBack", "InProgress", "Replaced"
_ENDINGS = {r.PROMOTED: PROMOTED, r.ANALYSIS_FAILED: ROLLED_BACK,
            r.PROGRESS_DEADLINE: ROLLED_BACK, r.ABORT_REQUESTED: ROLLED_BACK,
            r.ERROR_LIMIT: ROLLED_BACK, r.EVALUATION_FAILED: ROLLED_BACK,
            r.EVALUATION_ERROR_LIMIT: ROLLED_BACK, r.INCONCLUSIVE_LIMIT: ROLLED_BACK,
            r.CANARY_UNAVAILABLE: ROLLED_BACK, r.RECONCILE_FAILED: ROLLED_BACK}
#: Events that record a person steering the release.
STEERING = (r.ABORT_REQUESTED, r.RETRY_REQUESTED, r.PAUSE_REQUESTED, r.MANUAL_STEP, r.DELETING)


class ReportError(Exception):
    """Nothing to report (no such release), said plainly."""


@dataclass(frozen=True)
class Event:
    at: datetime
    type: str
    reason: str
    message: str


@dataclass
class MetricSeries:
    spec: MetricSpec
    canary: list[Point] = field(default_factory=list)
    stable: list[Point] = field(default_factory=list)
    verdict: str | None = None
    source: str = "prometheus"  # or "events"

    @property
    def threshold(self) -> str:
        m = self.spec
        parts = [f"≤ {m.max:g}" if m.max is not None else "",
                 f"≥ {m.min:g}" if m.min is not None else "",
                 f"≤ {m.max_ratio_to_stable:g}× stable" if m.max_ratio_to_stable else "",
                 f"≥ {m.min_ratio_to_stable:g}× stable" if m.min_ratio_to_stable else ""]
        return ", ".join(p for p in parts if p)


@dataclass
class Release:
    namespace: str
    name: str
    revision: str | None
    replaced: str | None
    start: datetime
    end: datetime
    outcome: str  # Promoted / RolledBack: <reason> / InProgress: step i/n / Replaced by <rev>
    events: list[Event]
    weights: list[Point]
    weights_source: str
    metrics: list[MetricSeries]
    status: dict[str, Any]

    @property
    def steering(self) -> list[Event]:
        return [e for e in self.events if e.reason in STEERING]


def parse_message(template: str, message: str) -> dict[str, str] | None:
    """The fields of ``message`` written from ``template`` (``"{canary} to {stable}"``)."""
    pattern, pos = "", 0
    for m in re.finditer(r"\{(\w+)(?::[^}]*)?\}", template):
        pattern += re.escape(template[pos:m.start()]) + f"(?P<{m.group(1)}>.+?)"
        pos = m.end()
    found = re.fullmatch(pattern + re.escape(template[pos:]), message)
    return found.groupdict() if found else None


def event_rows(items: Sequence[dict[str, Any]]) -> list[Event]:
    out = []
    for e in items:
        when = e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or \
            (e.get("metadata") or {}).get("creationTimestamp")
        if not when:
            continue
        out.append(Event(datetime.fromisoformat(str(when).replace("Z", "+00:00")),
                         str(e.get("type", "")), str(e.get("reason", "")),
                         str(e.get("message", ""))))
    return sorted(out, key=lambda e: e.at)


def release_window(events: list[Event], revision: str | None, now: datetime,
                   status: dict[str, Any] | None = None
                   ) -> tuple[str | None, str | None, datetime, datetime, str] | None:
    """(revision, replaced, start, end, outcome) of the release, from its Events; None when no
    ``NewRelease`` Event names it."""
    starts = [(i, f) for i, e in enumerate(events) if e.reason == r.NEW_RELEASE
              and (f := parse_message(r.NEW_RELEASE_MSG, e.message)) is not None
              and (revision is None or f["canary"] == revision)]
    if not starts:
        return None
    i, fields = starts[-1]
    for e in events[i + 1:]:
        if e.reason in _ENDINGS:
            outcome = _ENDINGS[e.reason]
            return (fields["canary"], fields["stable"], events[i].at, e.at,
                    outcome if outcome == PROMOTED else f"{outcome}: {e.reason}")
        if e.reason == r.NEW_RELEASE:
            by = parse_message(r.NEW_RELEASE_MSG, e.message) or {}
            return (fields["canary"], fields["stable"], events[i].at, e.at,
                    f"{REPLACED} by {by.get('canary', 'a newer release')}")
    st = status or {}
    step = st.get("currentStep")
    at = f": step {int(step) + 1}" if isinstance(step, int) and \
        st.get("canaryRevision") == fields["canary"] else ""
    return fields["canary"], fields["stable"], events[i].at, now, f"{IN_PROGRESS}{at}"


def weights_from_events(events: list[Event], start: datetime, end: datetime) -> list[Point]:
    points: list[Point] = [(start, 0.0)]
    for e in events:
        if not start <= e.at <= end:
            continue
        if e.reason == r.STEP_WEIGHT_SET:
            f = parse_message(r.STEP_WEIGHT_SET_MSG, e.message)
            if f is not None:
                points.append((e.at, float(f["weight"])))
        elif e.reason == r.PROMOTED:
            points.append((e.at, 100.0))
        elif e.reason in _ENDINGS:
            points.append((e.at, 0.0))
    return points


def metrics_from_events(series: list[MetricSeries], events: list[Event], start: datetime,
                        end: datetime) -> None:
    """The canary values of each verdict change (``AnalysisVerdict`` Events)."""
    by_name = {s.spec.name: s for s in series}
    for e in events:
        f = parse_message(r.VERDICT_CHANGED_MSG, e.message) if e.reason == r.VERDICT_CHANGED \
            else None
        if f is None or not start <= e.at <= end or f["metric"] not in by_name:
            continue
        s = by_name[f["metric"]]
        with contextlib.suppress(ValueError):  # a value written as "-" (no data)
            s.canary.append((e.at, float(f["value"])))
        s.verdict, s.source = f["verdict"], "events"


def _points(result: list[dict[str, Any]]) -> list[Point]:
    return [(datetime.fromtimestamp(float(t), UTC), float(v))
            for item in result[:1] for t, v in item.get("values", [])]


def query_prometheus(url: str, rel_ns: str, rel_name: str, metrics: list[MetricSeries],
                     start: datetime, end: datetime, timeout: float = 15.0) -> list[Point]:
    """Fill ``metrics`` from the operator's series; return the canary weight series."""
    from prometheus_api_client import PrometheusConnect

    prom = PrometheusConnect(url=url, disable_ssl=False, timeout=int(timeout))
    span = max((end - start).total_seconds(), 60.0)
    step = f"{max(1, int(span / 600))}s"  # at most ~600 points per series
    sel = f'namespace="{rel_ns}",name="{rel_name}"'

    def series(promql: str) -> list[Point]:
        return _points(prom.custom_query_range(promql, start_time=start, end_time=end,
                                               step=step))

    weights = series(f"max(inference_rollout_canary_weight{{{sel}}})")
    for s in metrics:
        for role in ("canary", "stable"):
            got = series(f'max(inference_rollout_analysis_value{{{sel},metric="{s.spec.name}",'
                         f'role="{role}"}})')
            setattr(s, role, got)
    return weights


def gather(rollout: dict[str, Any], event_items: Sequence[dict[str, Any]],
           prometheus_url: str | None, revision: str | None = None,
           since: datetime | None = None, until: datetime | None = None,
           now: datetime | None = None) -> Release:
    """The release to report: its window, Events, weights and metric series."""
    now = now or datetime.now(UTC)
    meta, status = rollout["metadata"], rollout.get("status") or {}
    spec = InferenceRolloutSpec.parse(rollout["spec"])
    events = [e for e in event_rows(event_items)
              if (since is None or e.at >= since) and (until is None or e.at <= until)]
    window = release_window(events, revision, until or now, status)
    if window is None:
        if revision is not None and since is None:
            raise ReportError(f"no NewRelease Event names revision {revision} (Events expire "
                              "after about an hour: pass --since/--until for an older release)")
        start = since or now - timedelta(hours=1)
        window = (revision or status.get("canaryRevision") or status.get("stableRevision"),
                  status.get("stableRevision"), start, until or now,
                  "no release found: no NewRelease Event in this window (they expire after "
                  "about an hour); the page shows the window")
    rev, replaced, start, end, outcome = window
    series = [MetricSeries(m) for m in effective_metrics(spec.analysis)]
    for s in series:
        res = (status.get("analysis") or {}).get(s.spec.name) or {}
        s.verdict = res.get("verdict")
    margin = timedelta(seconds=30)
    weights: list[Point] = []
    source = "prometheus"
    if prometheus_url:
        try:
            weights = query_prometheus(prometheus_url, meta["namespace"], meta["name"], series,
                                       start - margin, end + margin)
        except Exception as e:  # the client raises its own and requests' errors: use the Events
            source = f"events; Prometheus {prometheus_url} failed: {type(e).__name__}"
    if not weights:
        weights = weights_from_events(events, start, end)
        source = source if source != "prometheus" else "events"
    if not any(s.canary for s in series):
        metrics_from_events(series, events, start, end)
    shown = [e for e in events if start <= e.at <= end]  # this release's own, nothing before
    return Release(meta["namespace"], meta["name"], rev, replaced, start, end, outcome, shown,
                   weights, source, series, status)
