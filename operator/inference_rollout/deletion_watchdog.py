"""Finish the deletions kopf never hands to the delete handler (namespaces mode only).

Why this exists: in namespaces mode kopf follows each watched namespace with its own watch
stream, and stops that stream once the namespace *looks* deleted: marked for deletion, with
status conditions, none of them True (kopf's fix for its issues #900/#1088).  Kubernetes deletes
a terminating namespace's pods first, and while they terminate it writes the namespace's deletion
conditions all False ("All content successfully removed").  kopf takes that for the end, stops
the stream, and the InferenceRollouts, deleted a moment later, never reach the delete handler:
the finalizer stays and the namespace is Terminating for ever (found by bench/, see
docs/benchmarks.md).  Cluster-wide mode has one stream for every namespace and is not affected.

So the operator remembers the namespaces it has served and, every ``SWEEP_SECONDS``, lists their
rollouts.  It also covers every namespace of its ``--namespace`` patterns that is being deleted
(explicit names as given; globs by a LIST of namespaces, which kopf's glob support needs anyway):
a process restarted after a namespace was marked never serves that namespace's rollouts (kopf has
already stopped watching it), and without this its rollouts kept the finalizer for ever (seen in
the e2e tier: a namespace deleted just before the test that SIGKILLs the operator).

A rollout marked for deletion more than ``GRACE_SECONDS`` ago that still carries the
finalizer gets the delete handler's own cleanup (traffic back to stable, or nothing when the
namespace refuses writes), and then loses the finalizer through a JSON patch that first tests
the entry is still ours, so a concurrent kopf removal cannot make it remove another finalizer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

# kopf's matcher, not a copy of its pattern syntax (a private module: pinned by the kopf version).
from kopf._cogs.structs.references import (
    NamespaceName,
    match_namespace,
    select_specific_namespaces,
)

from .kube import KubeError
from .kube_protocol import FinalizerClient
from .paths import cluster_path, rollout_path

log = logging.getLogger("inference_rollout")

SWEEP_SECONDS = 15.0
#: kopf normally handles a deletion within a second or two; only what it missed is taken over.
GRACE_SECONDS = 30.0

Cleanup = Callable[[dict[str, Any]], Awaitable[None]]


def stuck(rollout: dict[str, Any], finalizer: str, now: datetime,
          grace: float = GRACE_SECONDS) -> bool:
    """Marked for deletion ``grace`` seconds ago or more and still held by ``finalizer``."""
    meta = rollout.get("metadata", {})
    marked = meta.get("deletionTimestamp")
    if not marked or finalizer not in (meta.get("finalizers") or []):
        return False
    since = datetime.fromisoformat(str(marked).replace("Z", "+00:00"))
    return (now - since).total_seconds() >= grace


def finalizer_removal(rollout: dict[str, Any], finalizer: str) -> list[dict[str, Any]]:
    """A JSON patch removing ``finalizer``, valid only while it is still at the same index."""
    index = rollout["metadata"]["finalizers"].index(finalizer)
    path = f"/metadata/finalizers/{index}"
    return [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]


async def sweep(kube: FinalizerClient, namespaces: set[str], finalizer: str, cleanup: Cleanup,
                now: datetime, grace: float = GRACE_SECONDS) -> list[str]:
    """One pass; returns ``namespace/name`` of every rollout whose finalizer it removed (those
    marked for deletion ``grace`` seconds ago or more)."""
    released = []
    for ns in sorted(namespaces):
        try:  # metadata only: a sweep of 500 healthy rollouts should not move their statuses
            listed = await kube.list_metadata(rollout_path(ns))
        except KubeError as e:
            if e.status == 404:
                namespaces.discard(ns)  # the namespace is gone
            else:
                log.warning("deletion watchdog: listing %s: %s", ns, e)
            continue
        for item in listed.get("items") or []:  # a metadata LIST of nothing says "items": null
            if not stuck(item, finalizer, now, grace):
                continue
            name = item["metadata"]["name"]
            path = rollout_path(ns, name)
            try:
                rollout = await kube.get_or_none(path)
                if rollout is None or not stuck(rollout, finalizer, now, grace):
                    continue  # gone, or released meanwhile
                await cleanup(rollout)
                await kube.request("PATCH", path, finalizer_removal(rollout, finalizer),
                                   "application/json-patch+json")
            except Exception as e:  # one rollout's failure must not stop the others
                log.warning("deletion watchdog: %s/%s: %s (next pass retries)", ns, name, e)
                continue
            log.info("deletion watchdog: %s/%s marked for deletion at %s and never handed to "
                     "the delete handler (kopf stopped watching the namespace); cleaned up, "
                     "finalizer removed", ns, name, rollout["metadata"]["deletionTimestamp"])
            released.append(f"{ns}/{name}")
    return released


def in_scope(namespace: str, patterns: tuple[str, ...]) -> bool:
    """Whether kopf serves ``namespace`` for these ``--namespace`` patterns: kopf's own matcher
    (comma-separated globs, ``!glob`` exclusions; any pattern may match), so the watchdog's scope
    is exactly what kopf watches."""
    return any(match_namespace(NamespaceName(namespace), p) for p in patterns)


async def deleted_in_scope(kube: FinalizerClient, patterns: tuple[str, ...]) -> set[str]:
    """The pattern's namespaces that may hold deletions kopf will not hand over: explicit names
    as given (no API call), and, when a pattern is a glob, those being deleted now."""
    found: set[str] = set(select_specific_namespaces(patterns))
    if len(found) < len(patterns):
        listed = await kube.list_metadata(cluster_path("", "v1", "namespaces"))
        found |= {item["metadata"]["name"] for item in listed.get("items") or []
                  if item["metadata"].get("deletionTimestamp")
                  and in_scope(item["metadata"]["name"], patterns)}
    return found


async def run(kube: FinalizerClient, namespaces: set[str], finalizer: str, cleanup: Cleanup,
              clock: Callable[[], datetime], patterns: tuple[str, ...] = ()) -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        try:
            if patterns:
                namespaces |= await deleted_in_scope(kube, patterns)
            await sweep(kube, namespaces, finalizer, cleanup, clock())
        except Exception:  # the watchdog must outlive any one bad pass
            log.exception("deletion watchdog: sweep failed (next pass retries)")
