"""``kubectl inference-rollout report NAME [--release REV] -o release.html``: one release as a
self-contained HTML page (docs/report.md).  Reads the rollout and its Events from the API server
and the operator's series from Prometheus (:mod:`.release_data`), then draws the page
(:mod:`.release_html`)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ..api.duration import parse_duration
from ..kube import Kube
from ..paths import ns_path, rollout_path
from .release_data import ReportError, gather
from .release_html import render


def add_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument("--release", metavar="REV", default=None,
                        help="the canary revision of the release (default: the latest release)")
    report.add_argument("-o", "--output", default="release.html", metavar="FILE",
                        help="where to write the page (default release.html; - for stdout)")
    report.add_argument("--prometheus", metavar="URL", default=None,
                        help="a Prometheus that scrapes the operator, to plot its series "
                             "(default: none, the page is drawn from the Events). Never taken "
                             "from the rollout's spec: that address is the rollout author's "
                             "choice, and the report runs on the viewer's machine")
    report.add_argument("--since", metavar="DURATION", default=None,
                        help="report this window (e.g. 3h) instead of the release's Events "
                             "(they expire after about an hour)")


async def rollout_events(kube: Kube, ns: str, name: str) -> list[dict[str, object]]:
    events = await kube.get(ns_path("", "v1", ns, "events"), params={
        "fieldSelector": f"involvedObject.name={name},involvedObject.kind=InferenceRollout"})
    return list(events.get("items", []))


async def write_report(kube: Kube, ns: str, args: argparse.Namespace) -> str:
    """Write the page; returns a one-line summary for the terminal."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ValueError("the report draws its plots with matplotlib: "
                         "pip install 'inference-rollout[report]' (or matplotlib)")
    body = await kube.get(rollout_path(ns, args.name))
    items = await rollout_events(kube, ns, args.name)
    prom = args.prometheus  # explicit only: see --prometheus
    now = datetime.now(UTC)
    since = now - timedelta(seconds=parse_duration(args.since)) if args.since else None
    try:
        release = await asyncio.to_thread(gather, body, items, prom, args.release, since, None,
                                          now)
    except ReportError as e:
        raise ValueError(str(e)) from e
    page = await asyncio.to_thread(render, release)
    if args.output == "-":
        print(page)
    else:
        Path(args.output).write_text(page, encoding="utf-8")
    return (f"{args.output}: release {release.revision} of {ns}/{args.name}, {release.outcome} "
            f"({len(release.events)} events, weights from {release.weights_source})")
