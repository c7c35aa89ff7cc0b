"""The human view of a rollout (``kubectl inference-rollout get``) shows the evidence behind a
sequential verdict under the metric's row."""

from __future__ import annotations

import unicodedata

from inference_rollout.cli.render import render_rollout


def test_get_shows_the_sequential_tests_state_under_the_metric() -> None:
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "spec": {}, "status": {
        "phase": "Degraded", "canaryWeight": 0, "analysis": {"slo-ttft-p99": {
            "value": 0.9975, "verdict": "Fail", "threshold": "≤ 0.45", "requests": 5,
            "badRequests": 5, "test": "5/5 over 0.45 s, p < 0.001: Fail", "requestRate": 0.5}}}}
    lines = render_rollout(body).splitlines()
    row = next(i for i, line in enumerate(lines) if line.lstrip().startswith("slo-ttft-p99"))
    assert "0.9975" in lines[row] and "Fail" in lines[row]
    assert lines[row + 1].strip() == "5/5 over 0.45 s, p < 0.001: Fail at 0.5 req/s"


def test_get_without_evidence_shows_one_row_per_metric() -> None:
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "status": {"analysis": {
        "errors": {"value": 0.001, "verdict": "Pass", "threshold": "≤ 0.01"}}}}
    lines = render_rollout(body).splitlines()
    assert lines[-1].lstrip().startswith("errors")


def test_get_shows_a_route_the_gateway_rejected() -> None:
    message = ("the gateway rejected generation 7 of the route for Gateway gw/sandbox: "
               "Accepted=False NotAllowedByListeners: no listener admits namespace prod")
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "status": {"conditions": [
        {"type": "RouteAccepted", "status": "False", "reason": "RouteRejected",
         "message": message},
        {"type": "RouteAccepted", "status": "Unknown", "reason": "RoutePending",
         "message": "waiting"}]}}
    lines = render_rollout(body).splitlines()
    assert f"RouteAccepted: RouteRejected: {message}" in lines
    assert not any("RoutePending" in line for line in lines)


def test_nothing_from_the_cluster_reaches_the_terminal_as_a_control_character() -> None:
    """Issue 29: a status message (or an Event) with escape sequences or a newline drew a fake
    'Healthy' on the viewer's terminal."""
    fake = "ok\x1b[2J\x1b[H\nPhase:     Healthy\u202e\x9b31m"
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "status": {
        "phase": "Degraded", "message": fake, "analysis": {"e\x1b]0;x\x07": {"verdict": "Fail"}},
        "conditions": [{"type": "Valid", "status": "False", "reason": "X", "message": fake}]}}
    view = render_rollout(body)
    assert not any(unicodedata.category(c)[0] == "C" for c in view if c != "\n")
    assert [line for line in view.splitlines() if line.startswith("Phase:")] == [
        "Phase:     Degraded"]
    assert "ok\\x1b[2J\\x1b[H\\x0aPhase:     Healthy\\u202e\\x9b31m" in view


def test_a_plot_title_is_never_math_text() -> None:
    """Issue 29: a Prometheus address like ``http://$x_$`` in the weights' source raised in
    matplotlib's math parser and stopped the report."""
    from inference_rollout.cli.release_html import _svg

    svg = _svg(lambda ax: ax.set_title("events; Prometheus http://p/$x_$ failed: $\\frac$"))
    assert svg.startswith("<svg")


def test_get_shows_what_the_release_cost() -> None:
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "status": {"releaseCost": {
        "revision": "09c054e966", "startedAt": "2026-12-06T12:00:00Z", "outcome": "RolledBack",
        "decidedAfter": 140.0, "stepsReachedAfter": [12.0, 75.0], "podSeconds": 203.4,
        "gpuSeconds": 813.6, "podsStarted": 2, "canaryRequests": 1204.0,
        "rolledBackRequests": 1204.0}}}
    assert render_rollout(body).splitlines()[-1] == (
        "Cost:      09c054e966 RolledBack after 2m20s: 203 pod-s (814 GPU-s) beyond steady "
        "state, 2 pods started, 1204 canary requests (1204 rolled back); steps at 12s, 1m15s")


def test_get_shows_the_probes_a_release_sent() -> None:
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "status": {"releaseCost": {
        "revision": "09c054e966", "startedAt": "2026-12-06T12:00:00Z", "outcome": "Promoted",
        "decidedAfter": 109.0, "stepsReachedAfter": [5.0], "canaryRequests": 480.0,
        "probeRequests": 1016, "probeSeconds": 12.4}}}
    assert render_rollout(body).splitlines()[-1].endswith(
        "480 canary requests, 1016 probes (12 s); steps at 5s")


def test_get_shows_pods_per_serving_version_and_what_each_serves() -> None:
    """An adapter release (docs/adapters.md): the counts per version, then each pod as its own
    /v1/models listed it, from status.adapterPods."""
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "status": {"adapterPods": [
        {"pod": "chat-t1-a", "version": "s1s1s1s1s1", "adapters": {"support": "s3://a/v1"}},
        {"pod": "chat-t1-b", "version": "s2s2s2s2s2", "adapters": {"support": "s3://a/v2"}},
        {"pod": "chat-t1-c", "version": None, "adapters": {}},
        {"pod": "chat-t1-d", "version": "s1s1s1s1s1", "adapters": None}]}}
    lines = render_rollout(body).splitlines()
    start = lines.index("Adapter pods: moving 1, s1s1s1s1s1 2, s2s2s2s2s2 1")
    rows = [line.split() for line in lines[start + 1:start + 5]]
    assert rows[0] == ["chat-t1-a", "s1s1s1s1s1", "support=s3://a/v1"]
    assert rows[1] == ["chat-t1-b", "s2s2s2s2s2", "support=s3://a/v2"]
    assert rows[2] == ["chat-t1-c", "moving", "(none", "loaded)"]
    assert rows[3] == ["chat-t1-d", "s1s1s1s1s1", "(no", "answer)"]


def test_get_without_adapters_has_no_adapter_lines() -> None:
    body = {"metadata": {"namespace": "prod", "name": "chat"}, "status": {"adapterPods": None}}
    assert not any(line.startswith("Adapter") for line in render_rollout(body).splitlines())
