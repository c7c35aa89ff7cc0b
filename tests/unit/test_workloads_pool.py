"""The InferencePool the operator creates for each revision with ``backendKind: InferencePool``:
the revision's pods (the Service's selector) on the serving port, owned by the rollout."""

from __future__ import annotations

from typing import Any

from inference_rollout.api.spec import GatewayAPITraffic
from inference_rollout.workloads.revisions import pool_body, revision_labels, service_body


def traffic(**over: Any) -> GatewayAPITraffic:
    return GatewayAPITraffic.model_validate(
        {"parentRefs": [{"name": "gw"}], "backendKind": "InferencePool", **over})


def test_a_pool_selects_exactly_the_revisions_pods_on_the_serving_port() -> None:
    pool = pool_body("serving", "chat", "uid-1", "abc123", 8000, traffic())
    svc = service_body("serving", "chat", "uid-1", "abc123", 8000)
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["name"] == "chat-abc123" == svc["metadata"]["name"]
    assert pool["spec"] == {"selector": {"matchLabels": revision_labels("chat", "abc123")},
                            "targetPorts": [{"number": 8000}]}
    assert pool["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    (owner,) = pool["metadata"]["ownerReferences"]
    assert owner["uid"] == "uid-1" and owner["controller"] is True


def test_the_endpoint_picker_is_named_per_pool() -> None:
    t = traffic(endpointPickerRef={"name": "{{pool}}-epp", "failureMode": "FailOpen"})
    pool = pool_body("serving", "chat", "u", "abc123", 8000, t)
    assert pool["spec"]["endpointPickerRef"] == {
        "kind": "Service", "name": "chat-abc123-epp", "port": {"number": 9002},
        "failureMode": "FailOpen"}
