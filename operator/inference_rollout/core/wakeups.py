"""Which rollouts a watch event of a revision's Deployment or of an HTTPRoute concerns, and
whether it is news worth an early reconcile.

Why: a rollout waiting for its canary's pods or for the gateway's answer used to look again
every ``POLL_SECONDS`` (2 s), so each step started 0–2 s after it could have, and each look cost
a LIST of Deployments and of pods (docs/benchmarks.md, finding 6).  The handlers now wake the
rollout's daemon on the events that end those waits:

* a revision's Deployment whose controller has caught up with its spec
  (``status.observedGeneration == metadata.generation``): ready and available counts are what
  the core reads.  The operator's own scale patches bump the generation, so they wake nothing
  until the Deployment controller has answered them;
* an HTTPRoute for which the gateway has reported on the current generation (a condition with
  ``observedGeneration == metadata.generation``).  The operator's own route writes bump the
  generation, so only the gateway's answer wakes.  The rollout is found from the route's
  backends: each is a revision Service named ``<rollout>-<revision>``, which covers owned routes
  and user-owned ones (``httpRouteRef``) alike.

The poll stays as the fallback (a missed watch event costs at most the old delay).  Pure: dicts
in, names out.
"""

from __future__ import annotations

from typing import Any

from ..api import HASH_LENGTH, LABEL_ROLLOUT


def deployment_rollout(body: dict[str, Any]) -> str | None:
    """The rollout of a revision's Deployment when its controller has caught up with it."""
    meta = body.get("metadata") or {}
    rollout = (meta.get("labels") or {}).get(LABEL_ROLLOUT)
    if not rollout:
        return None
    observed = (body.get("status") or {}).get("observedGeneration")
    if observed is None or observed != meta.get("generation"):
        return None
    return str(rollout)


def route_rollouts(body: dict[str, Any]) -> set[str]:
    """The rollouts whose revisions a route sends to, once the gateway has answered for the
    route's current generation (none before)."""
    meta = body.get("metadata") or {}
    generation = meta.get("generation")
    parents = (body.get("status") or {}).get("parents") or []
    answered = any(c.get("observedGeneration") == generation
                   for p in parents for c in (p.get("conditions") or []))
    if not answered:
        return set()
    rollouts: set[str] = set()
    for rule in (body.get("spec") or {}).get("rules") or []:
        for ref in rule.get("backendRefs") or []:
            rollout, dash, revision = str(ref.get("name") or "").rpartition("-")
            if rollout and dash and len(revision) == HASH_LENGTH:
                rollouts.add(rollout)
    return rollouts
