"""Events on a real API server (operator/inference_rollout/events.py, issue 33): the same Event
posted again -- a retried decision, a restarted operator -- is one Event object whose ``count``
is 2, as ``kubectl describe`` shows for client-go's recorder, and the server accepts what the
operator writes (names, timestamps, the involved object)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.integration.rollout_world import create_namespace, kube_for

from inference_rollout.core.types import RecordEvent
from inference_rollout.events import post_event
from inference_rollout.paths import ns_path
from irsandbox.control_plane import ControlPlane

pytestmark = pytest.mark.integration


def test_the_same_event_twice_is_one_event_with_count_two(control_plane: ControlPlane) -> None:
    ns = "events-once"
    body = {"apiVersion": "rollouts.inference.dev/v1alpha1", "kind": "InferenceRollout",
            "metadata": {"name": "chat", "namespace": ns, "uid": "5f0e-1"}}
    t0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)

    async def story() -> list[dict[str, Any]]:
        kube = await kube_for(control_plane)
        try:
            await create_namespace(kube, ns)
            rolled_back = RecordEvent("Warning", "AnalysisFailed", "ttft-p99 0.91s > 0.45s")
            await post_event(kube, body, rolled_back, t0)
            await post_event(kube, body, rolled_back, t0 + timedelta(seconds=30))  # again
            await post_event(kube, body, RecordEvent("Normal", "NewRelease", "canary 3ecc2ed752"),
                             t0)
            items = (await kube.get(ns_path("", "v1", ns, "events")))["items"]
            return sorted(items, key=lambda e: e["reason"])
        finally:
            await kube.close()

    failed, new = asyncio.run(story())
    assert (failed["reason"], failed["count"], new["reason"], new["count"]) == \
        ("AnalysisFailed", 2, "NewRelease", 1)
    assert failed["firstTimestamp"] == "2026-12-06T12:00:00Z"
    assert failed["lastTimestamp"] == "2026-12-06T12:00:30Z"
    assert failed["involvedObject"]["kind"] == "InferenceRollout"
    assert failed["involvedObject"]["uid"] == "5f0e-1"
