"""Kubernetes Events as client-go's recorder writes them: an identical Event again is one Event
with a higher ``count``, not a second object.

kopf's ``kopf.event`` creates a new Event every time, so a decision posted again (a retry after a
conflict, a restart) showed twice in ``kubectl describe`` and in the release report (issue 33).
Here an Event is named after what it says: ``<rollout>.<hash of the rollout's UID, type, reason
and message>``. Posting it creates that object; if it exists, its ``count`` goes up by one and
``lastTimestamp`` moves, as the recorder's aggregation does (client-go keys by the same fields).
The name is the key, so the aggregation holds across restarts and leader changes, which the
recorder's in-memory cache does not.

Events are best effort: a refused or failed post is logged ("Failed to post an event", the words
kopf uses, which tests/sandbox/test_delivery_rbac.py looks for) and never fails a reconcile.
"""

from __future__ import annotations

import hashlib
import logging
import socket
from datetime import UTC, datetime
from typing import Any

from .core.types import RecordEvent
from .kube import KubeError
from .kube_protocol import KubeClient
from .paths import ns_path

log = logging.getLogger("inference_rollout")

COMPONENT = "inference-rollout"
MAX_MESSAGE = 1024  # the API server refuses longer Event messages
_HASH_CHARS = 16


def event_name(body: dict[str, Any], event: RecordEvent) -> str:
    """The Event's name: the rollout's name, a dot, and 16 hex characters of what it says."""
    meta = body["metadata"]
    key = "\0".join((meta.get("uid", ""), event.type, event.reason, event.message[:MAX_MESSAGE]))
    return f"{meta['name']}.{hashlib.sha256(key.encode()).hexdigest()[:_HASH_CHARS]}"


def event_object(body: dict[str, Any], event: RecordEvent, now: datetime) -> dict[str, Any]:
    meta = body["metadata"]
    at = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # metav1.Time: whole seconds
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": event_name(body, event), "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": body.get("apiVersion", ""), "kind": body.get("kind", ""),
                           "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta.get("uid", "")},
        "type": event.type, "reason": event.reason, "message": event.message[:MAX_MESSAGE],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT, "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": at, "lastTimestamp": at, "count": 1,
    }


async def post_event(kube: KubeClient, body: dict[str, Any], event: RecordEvent,
                     now: datetime) -> None:
    """Create the Event, or count it once more if it exists."""
    new = event_object(body, event, now)
    ns, name = new["metadata"]["namespace"], new["metadata"]["name"]
    collection = ns_path("", "v1", ns, "events")
    try:
        try:
            await kube.create(collection, new)
            return
        except KubeError as e:
            if e.status != 409:
                raise
        path = ns_path("", "v1", ns, "events", name)
        current = await kube.get(path)
        await kube.merge_patch(path, {
            "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
            "count": int(current.get("count") or 1) + 1,
            "lastTimestamp": new["lastTimestamp"]})
    except KubeError as e:
        # A lost race on the count (409) or a refused write: the Event is best effort.
        log.warning("Failed to post an event %s %s for %s/%s: %s", event.type, event.reason,
                    ns, body["metadata"]["name"], e)
