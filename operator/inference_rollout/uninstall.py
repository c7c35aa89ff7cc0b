"""``inference-rollout release-finalizers``: finish deletions that no operator will finish.

When the operator is removed before its rollouts (``helm uninstall`` first, or a test tier that
stops its operator early), every InferenceRollout deleted afterwards keeps the finalizer
``rollouts.inference.dev/finalizer`` and its namespace stays Terminating.  Removing the finalizer
by hand would skip what the finalizer protects: traffic back to stable and, with a user-owned
route, the stable revision's Deployment and Service kept alive for that route.

This command does what the operator's delete handler does, with the same code
(``reconciler.release_before_deletion``: the core's delete path), then removes the finalizer with
the deletion watchdog's guarded JSON patch.  It acts only on rollouts already marked for deletion
and never on live ones; a rollout whose cleanup fails keeps its finalizer (and is reported).
docs/install.md, "Uninstall", has the whole procedure.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from .api import GROUP, PLURAL, VERSION
from .core.types import RecordEvent
from .deletion_watchdog import sweep
from .kube import Kube, load_configuration
from .paths import cluster_path, rollout_path
from .reconciler import DeletionHeld, Deps, release_before_deletion

FINALIZER = f"{GROUP}/finalizer"
#: How long the command waits for a canary taken off the route to drain (a gateway follows a
#: route change within seconds) before it lets the rollout, and so its pods, go.
DRAIN_WAIT_SECONDS = 10.0


async def _print_event(body: dict[str, Any], event: RecordEvent) -> None:
    meta = body["metadata"]
    print(f"{meta['namespace']}/{meta['name']}: {event.reason}: {event.message}")


async def _namespaces_with_rollouts(kube: Kube) -> set[str]:
    listed = await kube.list_metadata(cluster_path(GROUP, VERSION, PLURAL))
    return {i["metadata"]["namespace"] for i in listed.get("items") or []}


async def release_finalizers(kube: Kube, namespaces: list[str] | None) -> tuple[list[str], int]:
    """Clean up and release every rollout marked for deletion in ``namespaces`` (None: all);
    returns the released ``namespace/name``s and how many marked rollouts are left."""
    scope = set(namespaces) if namespaces else await _namespaces_with_rollouts(kube)
    deps = Deps(kube=kube, post_event=_print_event)

    async def cleanup(body: dict[str, Any]) -> None:
        try:
            await release_before_deletion(deps, body)
        except DeletionHeld as e:
            # No operator will come back for the rest of the drain: give the gateways a moment
            # to follow the route, not the hour an abortScaleDownDelay may say.
            wait = min(e.seconds, DRAIN_WAIT_SECONDS)
            meta = body["metadata"]
            print(f"{meta['namespace']}/{meta['name']}: {e}; waiting {wait:.0f}s for the "
                  "gateway to follow the route")
            await asyncio.sleep(wait)

    released = await sweep(kube, set(scope), FINALIZER, cleanup, datetime.now(UTC), grace=0)
    left = 0
    for ns in scope:
        listed = await kube.list_metadata(rollout_path(ns))
        left += sum(1 for i in listed.get("items") or []
                    if i["metadata"].get("deletionTimestamp")
                    and FINALIZER in (i["metadata"].get("finalizers") or []))
    return released, left


def run(namespaces: list[str] | None, kubeconfig: str | None) -> int:
    """The command: 0 when nothing marked for deletion is left holding the finalizer."""
    async def main() -> tuple[list[str], int]:
        kube = Kube(await load_configuration(kubeconfig))
        try:
            return await release_finalizers(kube, namespaces)
        finally:
            await kube.close()

    released, left = asyncio.run(main())
    for name in released:
        print(f"{name}: traffic on stable, finalizer removed")
    if left:
        print(f"{left} rollout(s) marked for deletion still hold the finalizer (their cleanup "
              "failed: see the warnings above; run again once the cause is fixed)",
              file=sys.stderr)
        return 1
    print(f"released {len(released)} rollout(s)")
    return 0
