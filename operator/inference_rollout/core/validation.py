"""Spec problems the CRD schema cannot catch, and the status of a spec that does not parse.

Reported as ``Valid=False`` (and the phase Degraded): the object is stored, but an invalid release
never receives traffic, and fixing the manifest resumes it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ..api import DNS_1035_LABEL, DNS_1123_LABEL, DNS_1123_SUBDOMAIN, REVISION_PATTERN
from ..api import reasons as r
from ..api.spec import ADAPTERS_NOT_BUILT, InferenceRolloutSpec
from ..api.status import InferenceRolloutStatus
from .conditions import set_condition
from .revision import MAX_ROLLOUT_NAME
from .timeutil import to_iso
from .types import NO_HEADER_ROUTES, HeaderRoute, SetWeights


def problems(spec: InferenceRolloutSpec, name: str, adapter_releases: bool = False) -> list[str]:
    """Problems with an otherwise well-formed spec: the rollout's own name, and adapters when
    this operator does not carry adapter releases (``--adapter-releases`` off)."""
    out = []
    if spec.adapters and not adapter_releases:
        out.append(ADAPTERS_NOT_BUILT)
    if len(name) > MAX_ROLLOUT_NAME:
        out.append(
            f"metadata.name: {len(name)} characters is too long; revision objects are named "
            f"<name>-<hash> and their pods must fit a DNS label: use at most {MAX_ROLLOUT_NAME}"
        )
    if not re.match(DNS_1035_LABEL, name):
        # The CRD rejects such a name since it has this rule; an object stored before stays here.
        out.append(
            f"metadata.name: {name!r} is not a DNS-1035 label (lower-case letters, digits and "
            "'-', starting with a letter); the revisions' Deployments and Services are named "
            "<name>-<hash>: recreate the rollout under such a name"
        )
    return out


#: What a name pattern means, for a person fixing the manifest (the regex says it to no one).
PATTERN_MEANINGS = {
    DNS_1123_SUBDOMAIN: "must be the name of an object in the rollout's namespace (lower-case "
                        "letters, digits, '-' and '.'; no '/' or '..': another namespace's objects "
                        "cannot be named)",
    DNS_1123_LABEL: "must be a DNS-1123 label (lower-case letters, digits and '-')",
    REVISION_PATTERN: "must be a revision (the pod template's hash: lower-case hex); only the "
                      "operator writes it",
}


def describe_validation_error(error: ValidationError, root: str = "spec") -> list[str]:
    """One line per problem: ``spec.<path>: <message>`` (or ``status.``)."""
    lines = []
    for e in error.errors():
        path = ".".join(str(p) for p in e["loc"] if p != "__root__")
        msg = str(e["msg"]).removeprefix("Value error, ")
        meaning = PATTERN_MEANINGS.get(str((e.get("ctx") or {}).get("pattern", "")))
        if e["type"] == "string_pattern_mismatch" and meaning:
            msg = f"{str(e['input'])[:80]!r} {meaning}"
        if root != "spec":
            lines.append(f"{root}.{path}: {msg}".rstrip(". :"))
            continue
        lines.append(msg if msg.startswith("spec.") else f"spec.{path}: {msg}".rstrip(". :"))
    return lines


def unparseable_status(
    status: InferenceRolloutStatus, found: list[str], generation: int, now: datetime
) -> InferenceRolloutStatus:
    """The status of a rollout whose spec fails validation: Valid=False says why, no revision is
    created, and the canary keeps no traffic (nothing can watch it while the spec does not
    parse).  Fixing the manifest resumes the release: the step's weight, hold and analysis start
    again once the canary can carry it."""
    new = status.model_copy(deep=True)
    message = r.INVALID_SPEC_MSG.format(problems="; ".join(found))
    set_condition(new, "Valid", "False", r.INVALID_SPEC, message, now, generation)
    if new.canary_weight:
        new.canary_weight, new.step_started_at = 0, None
        new.step_entered_at = to_iso(now)
    new.phase = "Degraded"
    new.message = message
    new.observed_generation = generation
    return new


def unreadable_status_patch(raw: dict[str, Any], found: list[str], generation: int,
                            now: datetime) -> dict[str, Any]:
    """The one status write for a status that does not parse (a name where a revision belongs,
    written by someone allowed to steer before the CRD refused it): ``Valid=False`` naming the
    field, phase Degraded, and nothing else. The operator then acts on no object the status
    names, so a malformed status can never become another object's path."""
    message = r.INVALID_STATUS_MSG.format(problems="; ".join(found))
    old = [c for c in raw.get("conditions") or [] if isinstance(c, dict)]
    previous = next((c for c in old if c.get("type") == "Valid"), {})
    same = previous.get("status") == "False" and previous.get("reason") == r.INVALID_STATUS
    valid = {"type": "Valid", "status": "False", "reason": r.INVALID_STATUS, "message": message,
             "lastTransitionTime": previous.get("lastTransitionTime") if same else to_iso(now),
             "observedGeneration": generation}
    return {"conditions": [*(c for c in old if c.get("type") != "Valid"), valid],
            "phase": "Degraded", "message": message}


def failed_status(
    status: InferenceRolloutStatus, error: str, generation: int, now: datetime
) -> InferenceRolloutStatus:
    """The status after a reconcile failed unexpectedly (a bug, or input nothing else caught):
    ``ReconcileFailed=True`` says why, and a release in flight is rolled back, because a canary
    the operator cannot watch must not keep traffic.  ``retry`` (or a new template) starts it
    again once the cause is fixed."""
    new = status.model_copy(deep=True)
    message = r.RECONCILE_FAILED_MSG.format(error=error)
    set_condition(new, r.RECONCILE_FAILED, "True", r.RECONCILE_FAILED, message, now, generation)
    if new.canary_revision and not new.aborted:
        new.aborted, new.abort_reason, new.aborted_at = True, r.RECONCILE_FAILED, to_iso(now)
        new.canary_weight, new.step_started_at = 0, None
        set_condition(new, "Aborted", "True", r.RECONCILE_FAILED, message, now, generation)
        new.phase = "Degraded"
    new.message = message
    return new


def traffic_to_stable(
    status: InferenceRolloutStatus, route: dict[str, int] | None, deleting: bool,
    header_routes: frozenset[HeaderRoute] = NO_HEADER_ROUTES,
) -> SetWeights | None:
    """The one route write that leaves the canary without traffic (off the route altogether when
    the rollout is being deleted) and takes every header route off (``header_routes``: those the
    route holds); None when the route already holds that, or does not exist."""
    stable = status.stable_revision
    if stable is None or route is None:
        return None
    canary = None if deleting else status.canary_revision
    if route == {stable: 100, **({canary: 0} if canary else {})} and not header_routes:
        return None
    return SetWeights(stable, canary, 0)
