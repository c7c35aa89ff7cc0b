"""What the gateway says of a route: ``status.parents`` read as one typed observation.

A weight the API server holds is not yet a weight the gateway serves.  A conformant Gateway API
implementation reports, per parent (Gateway) of the route, a ``RouteParentStatus`` whose
conditions ``Accepted`` and ``ResolvedRefs`` carry the ``observedGeneration`` they were computed
for (Gateway API v1, ``RouteParentStatus``).  So the route's current ``metadata.generation`` is
in force only when, for EVERY parentRef of the route, some entry for that parent has both
conditions True at that generation.  A condition False at the current generation is the
gateway's refusal (``NoMatchingParent``, ``NotAllowedByListeners``, ``BackendNotFound``,
``RefNotPermitted``, ...); one at an older generation is only stale (the gateway has not caught
up), as is a condition without ``observedGeneration``.

Parents are compared with the defaults of ``ParentReference`` filled in (group
``gateway.networking.k8s.io``, kind ``Gateway``, the route's namespace), since implementations
differ in whether they copy the reference as written or with its defaults.

This module only reads: the core decides what a pending or rejected route means for a release.
"""

from __future__ import annotations

from typing import Any

from ..core.types import (
    RouteAcceptance,
    RouteApplied,
    RoutePending,
    RouteRejected,
    RouteUnreported,
)

GATEWAY_GROUP = "gateway.networking.k8s.io"
#: The two conditions that together say the gateway serves the route as written.
REQUIRED_CONDITIONS = ("Accepted", "ResolvedRefs")

ParentKey = tuple[str, str, str, str, str, str]


def parent_key(ref: dict[str, Any], route_namespace: str) -> ParentKey:
    """A ``ParentReference`` with its defaults, comparable across implementations."""
    return (str(ref.get("group") or GATEWAY_GROUP), str(ref.get("kind") or "Gateway"),
            str(ref.get("namespace") or route_namespace), str(ref.get("name", "")),
            str(ref.get("sectionName") or ""), str(ref.get("port") or ""))


def describe_parent(key: ParentKey) -> str:
    """``Gateway gw/sandbox`` (``/http`` with a sectionName, ``:80`` with a port)."""
    _group, kind, namespace, name, section, port = key
    return (f"{kind} {namespace}/{name}" + (f"/{section}" if section else "")
            + (f":{port}" if port else ""))


def route_acceptance(route: dict[str, Any]) -> RouteAcceptance:
    """The gateway's verdict on ``route`` (an HTTPRoute as the API server returns it)."""
    meta = route.get("metadata") or {}
    namespace, generation = str(meta.get("namespace", "")), int(meta.get("generation") or 0)
    reported = (route.get("status") or {}).get("parents") or []
    if not reported:
        return RouteUnreported(generation)
    by_parent: dict[ParentKey, list[dict[str, Any]]] = {}
    for entry in reported:
        key = parent_key(entry.get("parentRef") or {}, namespace)
        by_parent.setdefault(key, []).append(entry)
    waiting: list[str] = []
    for ref in (route.get("spec") or {}).get("parentRefs") or []:
        key = parent_key(ref, namespace)
        entries = by_parent.get(key, [])
        rejected = _rejection(entries, generation, key)
        if rejected is not None:
            return rejected
        if not any(_accepted(e, generation) for e in entries):
            waiting.append(_why_waiting(entries, generation, key))
    if waiting:
        return RoutePending(generation, "; ".join(waiting))
    return RouteApplied(generation)


def _conditions(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("type")): c for c in entry.get("conditions") or []}


def _current(condition: dict[str, Any], generation: int) -> bool:
    observed = condition.get("observedGeneration")
    return observed is not None and int(observed) == generation


def _accepted(entry: dict[str, Any], generation: int) -> bool:
    conditions = _conditions(entry)
    return all((c := conditions.get(t)) is not None and c.get("status") == "True"
               and _current(c, generation) for t in REQUIRED_CONDITIONS)


def _rejection(entries: list[dict[str, Any]], generation: int,
               key: ParentKey) -> RouteRejected | None:
    for entry in entries:
        conditions = _conditions(entry)
        for t in REQUIRED_CONDITIONS:
            c = conditions.get(t)
            if c is not None and c.get("status") == "False" and _current(c, generation):
                return RouteRejected(generation, describe_parent(key), t,
                                     str(c.get("reason") or "Unknown"),
                                     str(c.get("message") or ""))
    return None


def _why_waiting(entries: list[dict[str, Any]], generation: int, key: ParentKey) -> str:
    parent = describe_parent(key)
    if not entries:
        return f"{parent}: no status from its gateway yet"
    conditions = _conditions(entries[0])
    for t in REQUIRED_CONDITIONS:
        c = conditions.get(t)
        if c is None:
            return f"{parent}: no {t} condition yet"
        if not _current(c, generation):
            return (f"{parent}: {t} is for generation {c.get('observedGeneration', '(none)')}, "
                    f"the route is at {generation}")
        if c.get("status") != "True":
            return f"{parent}: {t} is {c.get('status')} ({c.get('reason') or 'no reason'})"
    return f"{parent}: not accepted yet"
