"""The human view of a rollout (``kubectl inference-rollout get``) shows the evidence behind a
sequential verdict under the metric's row."""

from __future__ import annotations

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
