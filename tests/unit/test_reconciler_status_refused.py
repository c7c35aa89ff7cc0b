"""A status that names anything but a revision is acted on by nothing (issue 29): the reconcile
writes Valid=False naming the field, and makes no other request. The trial that found it: a
tenant allowed to steer wrote ``canaryRevision: ../../team-b/deployments/bank`` and the operator
scaled team-b's Deployment. (The CRD now refuses such a write; this covers a status stored
before that rule.)"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.fakes import no_events
from tests.unit.test_api_models import with_changes

from inference_rollout.api import reasons as r
from inference_rollout.reconciler import Deps, reconcile


class Recording:
    """Any request is recorded; only the status PATCH answers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def __getattr__(self, method: str) -> Any:
        async def call(path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
            self.calls.append((method, str(path), args[0] if args else None))
            return {}
        return call


def test_a_status_naming_another_namespaces_object_is_refused_and_nothing_else_happens() -> None:
    kube = Recording()
    deps = Deps(kube=kube, post_event=no_events)
    body = {"metadata": {"namespace": "team-a", "name": "chat", "uid": "u", "generation": 3,
                         "resourceVersion": "7"},
            "spec": with_changes(),
            "status": {"stableRevision": "0123456789",
                       "canaryRevision": "../../team-b/deployments/bank", "canaryWeight": 20}}
    asyncio.run(reconcile(deps, body))
    assert [c[0] for c in kube.calls] == ["merge_patch"], kube.calls
    _method, path, patch = kube.calls[0]
    assert path.endswith("/namespaces/team-a/inferencerollouts/chat/status")
    valid = next(c for c in patch["status"]["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and valid["reason"] == r.INVALID_STATUS
    assert "status.canaryRevision" in valid["message"] and "revision" in valid["message"]
    assert "team-b" not in path and patch["status"]["phase"] == "Degraded"
    assert patch["metadata"]["resourceVersion"] == "7"

    # the same status again: nothing new to write, so nothing is written
    body["status"] = {**body["status"], **patch["status"]}
    kube.calls.clear()
    asyncio.run(reconcile(deps, body))
    assert kube.calls == []


def test_a_status_moment_that_is_not_a_timestamp_is_refused_naming_the_field() -> None:
    """The core parses every moment the status holds (``stepStartedAt``, ``abortedAt``, the
    cost's ``startedAt``, …): one that is not a timestamp used to fail that rollout's reconcile
    on every call; it is Valid=False naming the field, and the CRD refuses the write."""
    kube = Recording()
    deps = Deps(kube=kube, post_event=no_events)
    body = {"metadata": {"namespace": "team-a", "name": "chat", "uid": "u", "generation": 3,
                         "resourceVersion": "7"},
            "spec": with_changes(),
            "status": {"stableRevision": "0123456789", "canaryRevision": "abcdef0123",
                       "canaryWeight": 20, "currentStep": 0, "stepStartedAt": "yesterday"}}
    asyncio.run(reconcile(deps, body))
    assert [c[0] for c in kube.calls] == ["merge_patch"], kube.calls
    valid = next(c for c in kube.calls[0][2]["status"]["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and valid["reason"] == r.INVALID_STATUS
    assert "status.stepStartedAt" in valid["message"], valid["message"]
