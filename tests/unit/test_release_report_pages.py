"""One release per report page, and plots a person reads at a glance (issue 33, items 2 and 3):
rendered pages for short, long, single-point and no-data releases, checked on their tick labels
and limits, not only that an image exists. (tests/integration/test_release_report.py renders
one with real Prometheus series in a real browser.)"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from inference_rollout.api import reasons as r
from inference_rollout.cli.release_data import gather
from inference_rollout.cli.release_html import metric_plot, render, time_limits
from irsandbox.manifests import inference_rollout

NS, NAME = "team-a", "chat"
ANALYSIS = {"interval": "10s", "prometheus": {"address": "http://unused:9090"},
            "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]}
T0 = datetime(2026, 12, 3, 10, 21, 0, tzinfo=UTC)


def event(at: datetime, reason: str, message: str, kind: str = "Normal") -> dict[str, Any]:
    return {"type": kind, "reason": reason, "message": message,
            "lastTimestamp": at.isoformat().replace("+00:00", "Z")}


def new_release(at: datetime, canary: str, stable: str) -> dict[str, Any]:
    return event(at, r.NEW_RELEASE, r.NEW_RELEASE_MSG.format(canary=canary, stable=stable,
                                                              steps=2))


def verdict(at: datetime, value: str, result: str = "Pass") -> dict[str, Any]:
    return event(at, r.VERDICT_CHANGED, r.VERDICT_CHANGED_MSG.format(
        metric="errors", verdict=result, value=value, threshold="≤ 0.01"))


def rollout() -> dict[str, Any]:
    body = inference_rollout(NAME, analysis=ANALYSIS)
    body["metadata"]["namespace"] = NS
    return body


def two_releases() -> list[dict[str, Any]]:
    """A slow canary rolled back, then a healthy one in progress (the issue's story)."""
    return [
        new_release(T0, "094e9a6290", "aaaaaaaaaa"),
        verdict(T0 + timedelta(seconds=30), "0.9", "Fail"),
        event(T0 + timedelta(seconds=31), r.ANALYSIS_FAILED, "rolled back: errors 0.9",
              "Warning"),
        new_release(T0 + timedelta(seconds=50), "3ecc2ed752", "aaaaaaaaaa"),
        event(T0 + timedelta(seconds=55), r.STEP_WEIGHT_SET, r.STEP_WEIGHT_SET_MSG.format(
            step=1, steps=2, weight=5, canary="3ecc2ed752")),
        verdict(T0 + timedelta(seconds=80), "0.001"),
    ]


def ticks(svg: str) -> list[str]:
    return re.findall(r">(\d\d:\d\d:\d\d)<", svg)


def test_a_page_holds_one_release_and_only_its_events() -> None:
    now = T0 + timedelta(seconds=90)
    latest = gather(rollout(), two_releases(), None, now=now)
    assert latest.revision == "3ecc2ed752" and latest.start == T0 + timedelta(seconds=50)
    assert {e.reason for e in latest.events} == {r.NEW_RELEASE, r.STEP_WEIGHT_SET,
                                                 r.VERDICT_CHANGED}
    assert not any("094e9a6290" in e.message for e in latest.events)
    assert latest.outcome == "InProgress"
    first = gather(rollout(), two_releases(), None, revision="094e9a6290", now=now)
    assert first.outcome == "RolledBack: AnalysisFailed"
    assert [e.reason for e in first.events] == [r.NEW_RELEASE, r.VERDICT_CHANGED,
                                                r.ANALYSIS_FAILED]
    # --since widens where the release is looked for, and the page still holds one release
    since = gather(rollout(), two_releases(), None, since=T0 - timedelta(minutes=15), now=now)
    assert since.revision == "3ecc2ed752" and since.start == latest.start
    assert "Release 3ecc2ed752" in render(since) and "094e9a6290" not in render(since)


def test_a_replaced_release_says_by_which() -> None:
    items = [*two_releases()[:2],
             new_release(T0 + timedelta(seconds=40), "bbbbbbbbbb", "aaaaaaaaaa")]
    rel = gather(rollout(), items, None, revision="094e9a6290", now=T0 + timedelta(minutes=1))
    assert rel.outcome == "Replaced by bbbbbbbbbb"


@pytest.mark.parametrize("span", [timedelta(minutes=1), timedelta(hours=1)])
def test_every_plot_spans_the_release_window_in_readable_ticks(span: timedelta) -> None:
    items = [new_release(T0, "3ecc2ed752", "aaaaaaaaaa"),
             *(verdict(T0 + span * f, f"{0.001 * (i + 1):g}")
               for i, f in enumerate((0.2, 0.5, 0.9))),
             event(T0 + span, r.PROMOTED, r.PROMOTED_MSG.format(canary="3ecc2ed752",
                                                                old="aaaaaaaaaa", delay="1m"))]
    rel = gather(rollout(), items, None, now=T0 + span * 2)
    page = render(rel)
    lo, hi = time_limits(rel.start, rel.end)
    for svg in re.findall(r"<svg.*?</svg>", page, re.S):
        labels = ticks(svg)
        assert len(set(labels)) >= 3, labels  # several distinct ticks, not one date repeated
        for label in labels:
            at = datetime.combine(T0.date(), datetime.strptime(label, "%H:%M:%S").time(), UTC)
            assert lo - timedelta(seconds=1) <= at <= hi + timedelta(seconds=1), (label, lo, hi)
        if span <= timedelta(minutes=1):  # a one-minute release reads in seconds
            assert len({lab[-2:] for lab in labels}) > 1, labels


def test_a_single_point_says_when_it_was_taken_and_no_data_says_so() -> None:
    items = [new_release(T0, "3ecc2ed752", "aaaaaaaaaa"), verdict(T0 + timedelta(seconds=20),
                                                                  "0.002")]
    rel = gather(rollout(), items, None, now=T0 + timedelta(seconds=40))
    (series,) = rel.metrics
    svg = metric_plot(series, (rel.start, rel.end))
    assert "0.002 at 10:21:20" in svg
    assert "00:00:00" not in ticks(svg)  # the bug: one point spread over a day of midnights
    series.canary.clear()
    assert "no values recorded" in metric_plot(series, (rel.start, rel.end))


def test_the_page_says_what_the_release_cost() -> None:
    """The status' record for its own release (a table), the ReleaseCost Event for an earlier
    one, and a plain 'not recorded' when neither exists."""
    told = event(T0 + timedelta(seconds=31), r.RELEASE_COST,
                 "release 094e9a6290 RolledBack after 31s: 40 pod-seconds (160 GPU-seconds) "
                 "beyond the steady state, 1 pods started, 12 canary requests counted, 12 of "
                 "them answered by a canary then rolled back; steps in force after 5s")
    items = [*two_releases()[:3], told, *two_releases()[3:]]
    body = rollout()
    body["status"] = {"releaseCost": {
        "revision": "3ecc2ed752", "startedAt": "2026-12-03T10:21:50Z", "podSeconds": 75.2,
        "gpuSeconds": 300.8, "podsStarted": 1, "canaryRequests": 3.0,
        "stepsReachedAfter": [5.0]}}
    now = T0 + timedelta(seconds=90)
    latest = render(gather(body, items, None, now=now))
    cost = latest.split('id="cost"')[1].split("<h2>")[0]
    assert "<td>pod-seconds beyond the steady state</td><td>75</td>" in cost
    assert "<td>GPU-seconds beyond the steady state</td><td>301</td>" in cost
    assert "<td>outcome</td><td>in progress</td>" in cost and "094e9a6290" not in cost
    first = render(gather(body, items, None, revision="094e9a6290", now=now))
    assert "release 094e9a6290 RolledBack after 31s: 40 pod-seconds" in \
        first.split('id="cost"')[1].split("<h2>")[0]
    body["status"] = {}
    assert "Not recorded" in render(gather(body, two_releases(), None, now=now))


def test_an_adapter_release_shows_each_pod_and_what_it_serves() -> None:
    """docs/adapters.md: the pods of an adapter release, their versions and what each one's
    /v1/models lists (as the status holds them), and nothing of the kind without adapters."""
    body = rollout()
    body["status"] = {"adapterPods": [
        {"pod": "chat-t1-a", "version": "3ecc2ed752", "adapters": {"support": "/a/v2"}},
        {"pod": "chat-t1-b", "version": None, "adapters": None},
        {"pod": "chat-t1-c", "version": "aaaaaaaaaa", "adapters": {}}]}
    page = render(gather(body, two_releases(), None, now=T0 + timedelta(seconds=90)))
    section = page.split('id="adapter-pods"')[1].split("<h2>")[0]
    assert "<td>chat-t1-a</td><td>3ecc2ed752</td><td>support=/a/v2</td>" in section
    assert "<td>chat-t1-b</td><td>moving (in no Service)</td><td>(no answer)</td>" in section
    assert "<td>chat-t1-c</td><td>aaaaaaaaaa</td><td>(none loaded)</td>" in section
    body["status"] = {}
    assert "adapter-pods" not in render(gather(body, two_releases(), None,
                                               now=T0 + timedelta(seconds=90)))
