"""The release report as one self-contained HTML page: plots drawn by matplotlib as inline SVG,
tables of verdicts, Events and steering, and how the release ended.  No script, no external
file: the page can be mailed, attached to a postmortem or opened offline."""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from .release_data import MetricSeries, Point, Release

#: matplotlib's Axes; its stubs do not accept datetimes as x values, which it plots natively.
Axes = Any

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;font-size:.9em}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}.Warning{color:#b00}.outcome{font-size:1.1em;font-weight:bold}
.Pass{color:#070}.Fail{color:#b00}.note{color:#666;font-size:.85em}
"""


def time_limits(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The x-axis of every plot of a release: its window and a little room at both ends (5 %,
    at least 5 s), so a one-minute release reads in seconds and a point at the end is visible."""
    pad = max((end - start) * 0.05, timedelta(seconds=5))
    return start - pad, end + pad


def _svg(draw: Callable[[Axes], None], height: float = 3.0,
         window: tuple[datetime, datetime] | None = None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    # Titles and labels hold text from the rollout (metric names, a Prometheus address in an
    # error): never parsed as math text, where `$x_$` raised and stopped the report. Text stays
    # text in the SVG (selectable, searchable, and the tests read the tick labels).
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False,
                                "svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(10, height))
        draw(ax)
        if window is not None:
            # the release's window on every plot: without it one point spanned a whole day
            # (ticks all 00:00:00), and each plot had its own scale
            lo, hi = time_limits(*window)
            ax.set_xlim(mdates.date2num(lo), mdates.date2num(hi))  # type: ignore[no-untyped-call]
        locator = mdates.AutoDateLocator(minticks=4, maxticks=10)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.DateFormatter(
            "%H:%M:%S", tz=UTC))  # type: ignore[no-untyped-call]
        ax.set_xlabel("time (UTC)")
        ax.grid(True, alpha=0.3)
        fig.autofmt_xdate()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog: inline SVG


def _xy(points: list[Point]) -> tuple[list[datetime], list[float]]:
    return [t for t, _ in points], [v for _, v in points]


def weights_plot(rel: Release) -> str:
    def draw(ax: Axes) -> None:
        xs, ys = _xy(rel.weights)
        ax.step(xs, ys, where="post", color="#1f77b4", label="canary weight %")
        for e in rel.events:
            if e.type == "Warning":
                ax.axvline(e.at, color="#b00", alpha=0.4, linestyle=":")
        ax.set_ylim(-5, 105)
        ax.set_ylabel("% of traffic to canary")
        ax.set_title(f"Traffic weights ({rel.weights_source})")
        ax.legend(loc="upper left")
    return _svg(draw, window=(rel.start, rel.end))


def metric_plot(s: MetricSeries, window: tuple[datetime, datetime] | None = None) -> str:
    def draw(ax: Axes) -> None:
        m = s.spec
        if s.canary:
            ax.plot(*_xy(s.canary), marker="o", markersize=4, color="#d62728", label="canary")
            if len(s.canary) == 1:  # one look: say when it was taken
                at, value = s.canary[0]
                ax.annotate(f"{value:g} at {at.astimezone(UTC):%H:%M:%S}", (at, value),
                            textcoords="offset points", xytext=(6, 6), fontsize=8)
        if s.stable:
            ax.plot(*_xy(s.stable), marker="o", markersize=4, color="#2ca02c", label="stable")
            for ratio, label in ((m.max_ratio_to_stable, "max"), (m.min_ratio_to_stable, "min")):
                if ratio:
                    xs, ys = _xy(s.stable)
                    ax.plot(xs, [v * ratio for v in ys], linestyle="--", color="#ff7f0e",
                            label=f"{label}: {ratio:g}× stable")
        for limit, label in ((m.max, "max"), (m.min, "min")):
            if limit is not None:
                ax.axhline(limit, linestyle="--", color="#ff7f0e", label=f"{label} {limit:g}")
        ax.set_title(f"{m.name} (threshold {s.threshold}; {s.source})")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left")
        if not s.canary and not s.stable:  # the threshold alone is no measurement
            ax.text(0.5, 0.5, "no values recorded", transform=ax.transAxes, ha="center")
    return _svg(draw, 2.6, window)


def _table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        f"<tr class=\"{escape(classes[i]) if classes else ''}\">"
        + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
        for i, row in enumerate(rows))
    return f"<table><tr>{head}</tr>{body}</table>"


def _cost(rel: Release) -> str:
    """The release's ``status.releaseCost`` while it is the status' (current or last) release,
    else its ``ReleaseCost`` Event; docs/report.md says how each number is counted."""
    cost = rel.status.get("releaseCost") or {}
    if cost.get("revision") == rel.revision:
        def took(v: Any) -> str:
            return "-" if v is None else f"{float(v):.0f} s"
        rows = [["outcome", str(cost.get("outcome") or "in progress")],
                ["time to each step's weight in force",
                 ", ".join(took(v) for v in cost.get("stepsReachedAfter") or []) or "-"],
                ["time to the outcome", took(cost.get("decidedAfter"))],
                ["pod-seconds beyond the steady state", f"{cost.get('podSeconds', 0):.0f}"],
                ["GPU-seconds beyond the steady state", f"{cost.get('gpuSeconds', 0):.0f}"],
                ["canary pods started (model loads)", str(cost.get("podsStarted", 0))],
                ["canary requests counted", f"{cost.get('canaryRequests', 0):.0f}"],
                ["answered by a canary then rolled back",
                 f"{cost.get('rolledBackRequests', 0):.0f}"]]
        if cost.get("probeRequests"):
            rows.append(["the operator's probes (requests, serving seconds)",
                         f"{cost['probeRequests']}, {cost.get('probeSeconds', 0):.0f} s"])
        return _table(["quantity", "value"], rows)
    told = [e for e in rel.events if e.reason == "ReleaseCost"]
    if told:
        return f"<p>{escape(told[-1].message)}</p>"
    return "<p class=note>Not recorded: the operator did not count this release (it predates " \
           "the count, or its ReleaseCost Event has expired).</p>"


def _adapter_pods(rel: Release) -> str:
    """A rollout with adapters (docs/adapters.md): each pod, the serving version whose Service
    selects it and the adapters its own ``/v1/models`` lists, as the status holds them now
    (rebuilt from the pods at every reconcile); nothing without adapters."""
    pods = rel.status.get("adapterPods")
    if not pods:
        return ""
    rows = [[str(p.get("pod")), str(p.get("version") or "moving (in no Service)"),
             "(no answer)" if p.get("adapters") is None else
             ", ".join(f"{k}={v}" for k, v in sorted(p["adapters"].items())) or "(none loaded)"]
            for p in pods]
    return ("<h2 id=\"adapter-pods\">Adapter pods now</h2><p>An adapter release moves running "
            "pods between versions in place: each pod's version and what it says it serves.</p>"
            + _table(["pod", "version", "adapters it serves"], rows))


def render(rel: Release) -> str:
    t = "%Y-%m-%d %H:%M:%S UTC"
    title = f"Release {rel.revision or '?'} of {rel.namespace}/{rel.name}"
    verdicts = [[s.spec.name, s.threshold, f"{s.canary[-1][1]:g}" if s.canary else "-",
                 f"{s.stable[-1][1]:g}" if s.stable else "-", s.verdict or "-"]
                for s in rel.metrics]
    events = [[e.at.strftime("%H:%M:%S"), e.type, e.reason, e.message] for e in rel.events]
    steering = [[e.at.strftime("%H:%M:%S"), e.reason, e.message] for e in rel.steering]
    plots = "".join(f"<figure>{metric_plot(s, (rel.start, rel.end))}</figure>"
                    for s in rel.metrics) or \
        "<p class=note>No analysis metrics in the spec.</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{CSS}</style></head><body>
<h1>{escape(title)}</h1>
<p class="outcome" id="outcome">Outcome: {escape(rel.outcome)}</p>
<p>Replacing {escape(rel.replaced or '-')} · from {rel.start.strftime(t)} to {rel.end.strftime(t)}
· phase now {escape(str(rel.status.get('phase')))}: {escape(str(rel.status.get('message')))}</p>
<h2>Traffic</h2><figure id="weights">{weights_plot(rel)}</figure>
<h2>Metrics against their thresholds</h2>{plots}
<h2 id="cost">What the release cost</h2>{_cost(rel)}
{_adapter_pods(rel)}
<h2>Verdicts</h2>{_table(["metric", "threshold", "last canary", "last stable", "verdict"],
                          verdicts, [row[-1] for row in verdicts])}
<h2>Steering</h2>{_table(["time", "request", "message"], steering) if steering else
                   "<p class=note>No steering requests in this release.</p>"}
<h2>Events</h2>{_table(["time", "type", "reason", "message"], events,
                        [e.type for e in rel.events])}
<p class="note">Generated by kubectl inference-rollout report. Weights and metric values are
the operator's own series (inference_rollout_canary_weight, inference_rollout_analysis_value)
when Prometheus has them, else read from the Events.</p>
</body></html>
"""
