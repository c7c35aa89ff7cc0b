"""The CRD's rules for the gateway settings on a REAL kube-apiserver: a manifest that the models
reject is rejected at apply time too, naming the field (the CEL rules mirror the validators)."""

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


@pytest.mark.parametrize("doc", [
    with_metric({"name": "g", "template": "gateway-error-rate", "gateway": "istio", "max": 0.01},
                route_status="Required"),
    with_metric({"name": "s", "template": "gateway-traffic-share", "max": 2, "minSamples": 2000}),
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
])
def test_invalid_gateway_settings_are_rejected_naming_the_field(
        control_plane: ControlPlane, doc: dict[str, Any], message: str) -> None:
    with control_plane.client() as c:
        r = c.post(PATH, json=doc)
    assert r.status_code == 422, r.text
    assert message in r.json()["message"], r.json()["message"]
