"""The release report (issue 17) against a real Prometheus scraping the operator's own series
from a loopback exporter, rendered in a real browser (Debian's chromium, headless): the page
shows the weights Prometheus recorded and each metric against its threshold, and its plots are
drawn (pixels of the plot colours in a screenshot)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from tests.integration.conftest import PrometheusLauncher

from inference_rollout.api import reasons as r
from inference_rollout.cli.release_data import gather
from inference_rollout.cli.release_html import render
from inference_rollout.operator_metrics import Registry
from irsandbox.manifests import inference_rollout

pytestmark = pytest.mark.integration

NS, NAME = "team-a", "chat"
ANALYSIS = {"interval": "10s", "prometheus": {"address": "http://unused:9090"},
            "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01},
                        {"name": "ttft", "template": "ttft-p99", "maxRatioToStable": 1.2}]}


@pytest.fixture()
def exporter() -> Iterator[tuple[Registry, str]]:
    """The operator's /metrics as Prometheus sees it, from a registry the test drives."""
    reg = Registry()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = reg.render().encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield reg, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def event(at: datetime, reason: str, message: str, type_: str = "Normal") -> dict[str, Any]:
    return {"type": type_, "reason": reason, "message": message,
            "lastTimestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_the_report_plots_what_prometheus_recorded_and_renders_in_chromium(
        prometheus: PrometheusLauncher, exporter: tuple[Registry, str], tmp_path: Path) -> None:
    reg, target = exporter
    labels = {"namespace": NS, "name": NAME}
    prom = prometheus([{"job_name": "operator", "static_configs": [{"targets": [target]}]}])
    prom.wait_for_targets(1)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    # the release as the operator exports it: 20%, then 50%, then a failing canary, rolled back
    timeline = [(20, 0.001, 0.30), (50, 0.004, 0.31), (50, 0.05, 0.45), (0, 0.05, 0.45)]
    for weight, errors, ttft in timeline:
        reg.set("inference_rollout_canary_weight", weight, **labels)
        reg.set("inference_rollout_analysis_value", errors, metric="errors", role="canary",
                **labels)
        reg.set("inference_rollout_analysis_value", 0.3, metric="ttft", role="stable", **labels)
        reg.set("inference_rollout_analysis_value", ttft, metric="ttft", role="canary", **labels)
        time.sleep(3)
    end = datetime.now(UTC).replace(microsecond=0)
    rollout = inference_rollout(NAME, analysis=ANALYSIS)
    rollout["metadata"]["namespace"] = NS
    rollout["status"] = {"phase": "Degraded", "message": "rolled back: errors 0.05 (Fail: ≤ 0.01)",
                         "analysis": {"errors": {"verdict": "Fail"}, "ttft": {"verdict": "Fail"}}}
    events = [
        event(start, r.NEW_RELEASE, r.NEW_RELEASE_MSG.format(canary="bbb222", stable="aaa111",
                                                              steps=3)),
        event(start + timedelta(seconds=1), r.STEP_WEIGHT_SET, r.STEP_WEIGHT_SET_MSG.format(
            step=1, steps=3, weight=20, canary="bbb222")),
        event(end, r.ABORT_REQUESTED, r.ABORT_REQUESTED_MSG, "Warning"),
        event(start - timedelta(hours=2), r.PROMOTED, "an earlier release's promotion"),
    ]
    release = gather(rollout, events, prom.url, now=end + timedelta(seconds=5))
    assert (release.revision, release.replaced) == ("bbb222", "aaa111")
    assert release.outcome == "RolledBack: AbortRequested"
    assert release.weights_source == "prometheus"
    weights = {v for _, v in release.weights}
    assert {20.0, 50.0, 0.0} <= weights, weights  # Prometheus' record, not the Events' 20%
    errors, ttft = release.metrics
    assert (errors.spec.name, errors.threshold) == ("errors", "≤ 0.01")
    assert max(v for _, v in errors.canary) == 0.05 and errors.stable == []
    assert ttft.threshold == "≤ 1.2× stable" and {v for _, v in ttft.stable} == {0.3}
    assert [e.reason for e in release.steering] == [r.ABORT_REQUESTED]
    assert "an earlier release's promotion" not in [e.message for e in release.events]

    page = tmp_path / "release.html"
    page.write_text(render(release))
    if (keep := os.environ.get("IR_REPORT_KEEP")):  # to look at the page and the screenshot
        shutil.copy(page, keep)
    html = page.read_text()
    for fetch in ("<script", "<link", "src=", 'href="http', "url(http"):  # self-contained
        assert fetch not in html, fetch
    assert html.count("<svg") == 3  # weights + two metrics
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: apt-get install -y chromium"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert "Release bbb222 of team-a/chat" in dom
    assert "Outcome: RolledBack: AbortRequested" in dom
    assert dom.count("<svg") == 3 and "errors (threshold ≤ 0.01; prometheus)" in dom
    shot = tmp_path / "release.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,1400",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    pixels = {c for _, c in Image.open(shot).convert("RGB").getcolors(1 << 24) or []}
    # the weight line (#1f77b4) and the canary's metric line (#d62728) were drawn
    for colour in ((0x1F, 0x77, 0xB4), (0xD6, 0x27, 0x28)):
        assert any(all(abs(p[i] - colour[i]) < 12 for i in range(3)) for p in pixels), colour


def test_without_prometheus_series_the_events_tell_the_weights_and_verdicts() -> None:
    start = datetime(2026, 12, 3, 3, 0, tzinfo=UTC)
    rollout = inference_rollout(NAME, analysis=ANALYSIS)
    rollout["metadata"]["namespace"] = NS
    events = [
        event(start, r.NEW_RELEASE, r.NEW_RELEASE_MSG.format(canary="c2", stable="c1", steps=2)),
        event(start + timedelta(seconds=5), r.STEP_WEIGHT_SET, r.STEP_WEIGHT_SET_MSG.format(
            step=1, steps=2, weight=10, canary="c2")),
        event(start + timedelta(seconds=20), r.VERDICT_CHANGED, r.VERDICT_CHANGED_MSG.format(
            metric="errors", verdict="Pass", value="0.002", threshold="≤ 0.01")),
        event(start + timedelta(seconds=60), r.PROMOTED, r.PROMOTED_MSG.format(
            canary="c2", old="c1", delay="1m")),
    ]
    release = gather(rollout, events, None, revision="c2", now=start + timedelta(hours=1))
    assert release.outcome == "Promoted" and release.weights_source == "events"
    assert [v for _, v in release.weights] == [0.0, 10.0, 100.0]
    assert release.metrics[0].canary == [(start + timedelta(seconds=20), 0.002)]
    assert release.metrics[0].verdict == "Pass"
    assert "<svg" in render(release)
