"""The CRD's rules for the gateway settings (the route, its metrics, the header routes) on a REAL
kube-apiserver: a manifest that the models reject is rejected at apply time too, naming the
field (the CEL rules mirror the validators)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from irsandbox.control_plane import ControlPlane
from irsandbox.manifests import inference_rollout

pytestmark = pytest.mark.integration

PATH = "/apis/rollouts.inference.dev/v1alpha1/namespaces/default/inferencerollouts?dryRun=All"


def with_metric(metric: dict[str, Any], route_status: str | None = None) -> dict[str, Any]:
    doc = inference_rollout("chat", analysis={
        "prometheus": {"address": "http://prom:9090"}, "metrics": [metric]})
    if route_status is not None:
        doc = copy.deepcopy(doc)
        doc["spec"]["traffic"]["gatewayAPI"]["routeStatus"] = route_status
    return doc


# header routes (docs/traffic.md)
TESTERS = {"headers": [{"name": "X-Canary", "value": "always"}]}
TESTERS_STEP = {"steps": [{"weight": 0, "pause": "10m"}, {"weight": 100}]}


def with_traffic(doc: dict[str, Any], strategy: dict[str, Any] | None = None,
                 **traffic: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["spec"]["traffic"].update(traffic)
    if strategy is not None:
        doc["spec"]["strategy"] = strategy
    return doc


ERRORS = with_metric({"name": "e", "template": "error-rate", "max": 0.01})
SHARE = with_metric({"name": "s", "template": "gateway-traffic-share", "max": 2})


@pytest.mark.parametrize("doc", [
    with_metric({"name": "g", "template": "gateway-error-rate", "gateway": "istio", "max": 0.01},
                route_status="Required"),
    with_metric({"name": "s", "template": "gateway-traffic-share", "max": 2, "minSamples": 2000}),
    with_traffic(ERRORS, TESTERS_STEP, testers=TESTERS),
    with_traffic(ERRORS, sessionAffinity={"cookie": {"name": "chat-rev", "maxAge": "30m"}},
                 testers=TESTERS),
])
def test_valid_gateway_settings_are_stored(control_plane: ControlPlane,
                                           doc: dict[str, Any]) -> None:
    with control_plane.client() as c:
        r = c.post(PATH, json=doc)
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(("doc", "message"), [
    (with_metric({"name": "e", "template": "error-rate", "gateway": "traefik", "max": 0.01}),
     "spec.analysis.metrics[name=e]: gateway: only the gateway-error-rate"),
    (with_metric({"name": "s", "template": "gateway-traffic-share", "maxRatioToStable": 2}),
     "spec.analysis.metrics[name=s]: gateway-traffic-share measures percentage points"),
    (with_metric({"name": "g", "template": "gateway-error-rate", "gateway": "nginx",
                  "max": 0.01}), "spec.analysis.metrics[0].gateway"),
    (with_metric({"name": "e", "template": "error-rate", "max": 0.01}, route_status="Maybe"),
     "spec.traffic.gatewayAPI.routeStatus"),
    (with_traffic(ERRORS, TESTERS_STEP),
     "spec.strategy.steps[0].weight: 0 is a testers' step, which needs spec.traffic.testers"),
    (with_traffic(SHARE, sessionAffinity={"cookie": {}}),
     "spec.analysis.metrics: gateway-traffic-share compares the canary's share"),
    (with_traffic(ERRORS, sessionAffinity={"cookie": {"name": "a b"}}),
     "spec.traffic.sessionAffinity.cookie.name"),
    (with_traffic(ERRORS, testers={"headers": []}), "spec.traffic.testers.headers"),
])
def test_invalid_gateway_settings_are_rejected_naming_the_field(
        control_plane: ControlPlane, doc: dict[str, Any], message: str) -> None:
    with control_plane.client() as c:
        r = c.post(PATH, json=doc)
    assert r.status_code == 422, r.text
    assert message in r.json()["message"], r.json()["message"]

