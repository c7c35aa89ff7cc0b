"""When a written weight counts as applied: the gateway's acceptance of the route, per policy.

The router reports what the gateway wrote in the route's status (:class:`RouteAcceptance`);
``spec.traffic.gatewayAPI.routeStatus`` says how much of it to require:

* ``IfReported`` (default): a route with no ``status.parents`` at all is trusted as written (a
  gateway that writes no route status must not block releases forever, and the sandbox's nginx
  translator writes none); once the gateway reports anything, the current generation must be
  accepted for every parent.
* ``Required``: the gateway must accept the current generation; a route it never reports on
  waits, and the step's progress deadline rolls the release back (``RouteNotAccepted``).
* ``Ignored``: the status is never consulted (the behaviour before route status was read).

A ``ResolvedRefs=False BackendNotFound`` is the one refusal that is not final.  Every backendRef
of the route is a revision the operator creates (its Service or InferencePool), so either the
gateway has not seen that object *yet* (its caches lag after its own restart or the API
server's) or the object is missing and the operator creates it again (deleted by hand; or, before
Services were created ahead of Deployments, never created by an operator killed between the two:
17 good canaries rolled back in the sandbox's chaos run).  While it lasts the gateway answers the
canary's share with HTTP 500 (Gateway API semantics), so the core takes that share back to 0 %
and raises it again once the gateway resolves the backend; the progress deadline bounds the wait
(:func:`unresolved_backend`).

Pure: no I/O, no clock.  The decision (start the hold, wait, roll back) is :mod:`.decide`'s.
"""

from __future__ import annotations

from typing import Literal

from ..api import reasons as r
from ..api.spec import InferenceRolloutSpec
from ..api.status import ConditionStatus
from .types import RouteAcceptance, RouteApplied, RoutePending, RouteRejected, RouteUnreported

Verdict = Literal["Applied", "Pending", "Rejected"]

#: Gateway API's reason (``RouteReasonBackendNotFound``) for a backendRef naming no object.
BACKEND_NOT_FOUND = "BackendNotFound"


def verdict(spec: InferenceRolloutSpec, acceptance: RouteAcceptance | None) -> Verdict:
    """Whether the weights the route holds are in force, per ``routeStatus``."""
    policy = spec.traffic.gateway_api.route_status
    if policy == "Ignored" or acceptance is None or isinstance(acceptance, RouteApplied):
        return "Applied"
    if isinstance(acceptance, RouteUnreported):
        return "Applied" if policy == "IfReported" else "Pending"
    if isinstance(acceptance, RouteRejected):
        return "Rejected"
    return "Pending"


def unresolved_backend(spec: InferenceRolloutSpec,
                       acceptance: RouteAcceptance | None) -> RouteRejected | None:
    """The gateway's refusal when it is only that it cannot find one of the route's backends
    (``ResolvedRefs=False BackendNotFound``; not under ``routeStatus: Ignored``): a wait for
    the gateway, not a verdict on the canary (see the module's docstring)."""
    if (isinstance(acceptance, RouteRejected) and acceptance.condition == "ResolvedRefs"
            and acceptance.reason == BACKEND_NOT_FOUND
            and verdict(spec, acceptance) == "Rejected"):
        return acceptance
    return None


def trusted_as_written(spec: InferenceRolloutSpec, acceptance: RouteAcceptance | None) -> bool:
    """A weight written in this call is in force at once: nothing from the gateway is awaited
    (``Ignored``, no route read, or a gateway that reports no route status under
    ``IfReported``).  Otherwise the gateway's answer comes with a later generation."""
    return (spec.traffic.gateway_api.route_status != "Required"
            and verdict(spec, acceptance) == "Applied"
            and not isinstance(acceptance, RouteApplied))


def rejection_message(rejected: RouteRejected) -> str:
    return r.ROUTE_REJECTED_MSG.format(
        generation=rejected.generation, parent=rejected.parent, condition=rejected.condition,
        reason=rejected.reason, message=rejected.message or "(no message)")


def pending_detail(acceptance: RouteAcceptance | None) -> str:
    """Why a written weight is not in force yet (for messages)."""
    if isinstance(acceptance, RoutePending):
        return acceptance.detail
    if isinstance(acceptance, RouteUnreported):
        return "the route has no status.parents"
    if isinstance(acceptance, RouteRejected):
        return rejection_message(acceptance)
    return "the route does not hold the weights written yet"


def condition(spec: InferenceRolloutSpec, acceptance: RouteAcceptance | None
              ) -> tuple[ConditionStatus, str, str] | None:
    """The ``RouteAccepted`` condition (status, reason, message); None when not tracked."""
    if spec.traffic.gateway_api.route_status == "Ignored" or acceptance is None:
        return None
    gen = acceptance.generation
    if isinstance(acceptance, RouteApplied):
        return "True", r.ROUTE_ACCEPTED, r.ROUTE_ACCEPTED_MSG.format(generation=gen)
    if isinstance(acceptance, RouteRejected):
        return "False", r.ROUTE_REJECTED, rejection_message(acceptance)
    if isinstance(acceptance, RouteUnreported):
        policy = (r.ROUTE_STATUS_TRUSTED if spec.traffic.gateway_api.route_status == "IfReported"
                  else r.ROUTE_STATUS_AWAITED)
        return "Unknown", r.ROUTE_STATUS_NOT_REPORTED, r.ROUTE_STATUS_NOT_REPORTED_MSG.format(
            generation=gen, policy=policy)
    return "Unknown", r.ROUTE_PENDING, r.ROUTE_PENDING_MSG.format(
        generation=gen, detail=acceptance.detail)
