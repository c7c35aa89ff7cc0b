"""Events as client-go's recorder writes them (operator/inference_rollout/events.py): the same
Event again is counted on the existing object, never a second one (issue 33: every Event showed
twice in the release report after a retried decision). Against the in-memory API server; the
real one: tests/integration/test_events_aggregated.py."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.unit.memory_kube import MemoryKube

from inference_rollout.core.types import RecordEvent
from inference_rollout.events import event_name, post_event
from inference_rollout.kube import KubeError
from inference_rollout.paths import is_subdomain

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
ROLLOUT: dict[str, Any] = {
    "apiVersion": "rollouts.inference.dev/v1alpha1", "kind": "InferenceRollout",
    "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1"}}
PROMOTED = RecordEvent("Normal", "Promoted", "revision 3ecc2ed752 is stable")


def stored_events(kube: MemoryKube) -> list[dict[str, Any]]:
    return [o for p, o in kube.objects.items() if "/events/" in p]


def post(kube: MemoryKube, event: RecordEvent, at: datetime = T0,
         body: dict[str, Any] = ROLLOUT) -> None:
    asyncio.run(post_event(kube, body, event, at))


def test_the_same_event_twice_is_one_event_counted_twice() -> None:
    kube = MemoryKube()
    post(kube, PROMOTED)
    post(kube, PROMOTED, T0 + timedelta(seconds=7))
    (ev,) = stored_events(kube)
    assert ev["count"] == 2
    assert ev["firstTimestamp"] == "2026-12-06T12:00:00Z"
    assert ev["lastTimestamp"] == "2026-12-06T12:00:07Z"
    assert ev["involvedObject"] == {"apiVersion": "rollouts.inference.dev/v1alpha1",
                                    "kind": "InferenceRollout", "name": "chat",
                                    "namespace": "team-a", "uid": "u-1"}
    assert (ev["type"], ev["reason"], ev["message"]) == ("Normal", "Promoted",
                                                         "revision 3ecc2ed752 is stable")


def test_what_differs_is_another_event() -> None:
    kube = MemoryKube()
    post(kube, PROMOTED)
    post(kube, RecordEvent("Normal", "Promoted", "revision 094e9a6290 is stable"))
    post(kube, RecordEvent("Warning", "Promoted", PROMOTED.message))
    other = {**ROLLOUT, "metadata": {**ROLLOUT["metadata"], "uid": "u-2"}}  # a new rollout
    post(kube, PROMOTED, body=other)
    assert sorted(e["count"] for e in stored_events(kube)) == [1, 1, 1, 1]


def test_names_are_object_names_whatever_the_message() -> None:
    name = event_name(ROLLOUT, RecordEvent("Warning", "X", "ü\n../../" * 500))
    assert is_subdomain(name) and name.startswith("chat.") and len(name) == len("chat.") + 16


def test_a_refused_post_is_logged_and_never_fails_the_reconcile(
        caplog: pytest.LogCaptureFixture) -> None:
    kube = MemoryKube()
    kube.fail[("POST", "/api/v1/namespaces/team-a/events")] = KubeError(
        403, "POST", "/api/v1/namespaces/team-a/events", '{"message": "forbidden"}')
    with caplog.at_level(logging.WARNING, "inference_rollout"):
        post(kube, PROMOTED)
    assert stored_events(kube) == []
    assert "Failed to post an event Normal Promoted for team-a/chat" in caplog.text
