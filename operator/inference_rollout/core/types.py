"""Plain data that flows into and out of the pure decision function.

Observations come in (what the handler read from the API server and Prometheus), actions go out
(what the handler must write).  Both are frozen dataclasses with no behaviour, so the core can be
tested with literals and a restart can be simulated by feeding the same values again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

from ..api.status import InferenceRolloutStatus

# --- observations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RevisionState:
    """One revision's Deployment as the API server reports it."""

    desired: int
    ready: int
    available: int
    unschedulable: int = 0  # pods Pending with reason Unschedulable (e.g. no free GPU)
    port: int | None = None  # the serving port of its pod template (its Service's port)
    args: tuple[str, ...] | None = None  # its serving container's vLLM argv (the lints read it)


class MeasurementError(StrEnum):
    """Why a query gave no usable number.  None of these ever promotes a release."""

    NO_DATA = "NoData"  # the query returned an empty vector
    UNREACHABLE = "Unreachable"  # Prometheus did not answer (refused, timeout, 5xx)
    TOO_FEW_SAMPLES = "TooFewSamples"  # the window held fewer requests than minSamples
    BAD_QUERY = "BadQuery"  # Prometheus rejected the PromQL (4xx): a spec error


@dataclass(frozen=True)
class Evidence:
    """Counts accumulated over the step (since its weight was reached, minus warmup) for the
    sequential tests.  Prometheus ``increase()`` extrapolates, so counts may be fractional.

    ``buckets``: a latency histogram's cumulative counts as ``(upper bound, count)`` pairs,
    ascending, the last bound ``inf`` (its count is every request).  ``requests``/``errors``:
    finished requests and failed ones (the ``error-rate`` template), and the same for the stable
    where the check is relative.
    """

    period_s: float
    buckets: tuple[tuple[float, float], ...] = ()
    requests: float | None = None
    errors: float | None = None
    stable_requests: float | None = None
    stable_errors: float | None = None


@dataclass(frozen=True)
class Measurement:
    """One metric measured once, for the canary and (for relative checks) the stable.

    ``evidence`` is present when the sequential rule counted requests for this metric."""

    value: float | None
    stable_value: float | None = None
    samples: float | None = None
    error: MeasurementError | None = None
    detail: str = ""
    evidence: Evidence | None = None


@dataclass(frozen=True)
class EvaluationOutcome:
    """One run of the business evaluation set against the canary and the stable.

    Scores are points (0-100: the share of cases passed).  ``error`` is set when the set could
    not be run (ConfigMap missing or malformed, a Service unreachable): that never passes.
    """

    revision: str
    canary_score: float | None = None
    stable_score: float | None = None
    cases: int = 0
    error: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class RouteApplied:
    """The gateway accepted the route's current generation for every parent (``Accepted`` and
    ``ResolvedRefs`` True, ``observedGeneration`` current): the weights it holds are in force."""

    generation: int


@dataclass(frozen=True)
class RoutePending:
    """The gateway writes status for this route but has not yet accepted its current generation
    for every parent (``detail`` says which parent and what it last observed)."""

    generation: int
    detail: str


@dataclass(frozen=True)
class RouteRejected:
    """The gateway refused the current generation for a parent: ``condition`` (``Accepted`` or
    ``ResolvedRefs``) is False with the gateway's ``reason`` and ``message``."""

    generation: int
    parent: str
    condition: str
    reason: str
    message: str


@dataclass(frozen=True)
class RouteUnreported:
    """The route has no ``status.parents`` at all: the gateway writes no route status (some
    implementations never do), or has not seen the route yet."""

    generation: int


#: What the gateway says of the route (``status.parents``), read with its weights.
RouteAcceptance = RouteApplied | RoutePending | RouteRejected | RouteUnreported

#: Rules a route holds beside its weighted split, each sending requests to one revision by header
#: (docs/traffic.md): ``testers`` (spec.traffic.testers: to the canary) and ``sessions``
#: (spec.traffic.sessionAffinity: a cookie keeps each client on the revision that answered it).
HeaderRoute = Literal["testers", "sessions"]
NO_HEADER_ROUTES: frozenset[HeaderRoute] = frozenset()


@dataclass(frozen=True)
class DrillResult:
    """What ``kubectl inference-rollout drill`` found, as it left it on the rollout."""

    id: str
    passed: bool
    summary: str


@dataclass(frozen=True)
class ProbeCounts:
    """What the operator's probes of ``canary`` have cost so far (``spec.analysis.probes``):
    requests sent to either Service, and their answer time summed (serving seconds)."""

    canary: str
    requests: int
    seconds: float
    #: Canary probes that answered well (the warmup counts them).
    canary_answered: int = 0


@dataclass(frozen=True)
class Observation:
    """The world as read at one instant.

    ``template_hash`` is the revision the spec asks for now.  ``measurements`` is present only when
    the handler ran the analysis because :func:`inference_rollout.core.decide.analysis_due` said
    so.  ``route`` is what the API server holds, read back by the router, and
    ``route_acceptance`` what the gateway wrote of it in the route's status.  ``invalid``
    carries spec problems found outside the CRD schema (template shape, lint errors): an invalid
    release never receives traffic.
    """

    generation: int
    template_hash: str
    revisions: dict[str, RevisionState] = field(default_factory=dict)
    route: dict[str, int] | None = None  # backend weights by revision; None: no route yet
    measurements: dict[str, Measurement] | None = None
    evaluation: EvaluationOutcome | None = None  # present when evaluation_due said so
    invalid: tuple[str, ...] = ()
    deleting: bool = False
    #: When the rollout was marked for deletion (its deletionTimestamp), when it is.
    deleting_since: datetime | None = None
    #: The gateway's view of the route; None when it was not read (no route yet).
    route_acceptance: RouteAcceptance | None = None
    #: The header routes the route holds (read from its rules' names with the weights).
    route_header_routes: frozenset[HeaderRoute] = NO_HEADER_ROUTES
    rollout: str = ""  # the rollout's name (the scale subresource's selector names it)
    #: The last drill's result as the drill wrote it on the rollout (None: none, or unreadable).
    drill: DrillResult | None = None
    #: The operator's probes of the current canary (None: none running).
    probes: ProbeCounts | None = None
    #: A rollout with adapters: each revision (serving version) -> the template hash of the
    #: Deployment whose pods it selects (docs/adapters.md).  A revision of the stable's
    #: template other than the stable runs on the stable's pods, moved in place (an adapter
    #: release's canary, or an old stable after promotion): :func:`.serving_versions.in_place`.
    #: Empty for a rollout without adapters: each revision is its own Deployment.
    templates: Mapping[str, str] = field(default_factory=dict)


# --- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnsureRevision:
    """Create or scale the revision's Deployment and Service."""

    revision: str
    replicas: int


@dataclass(frozen=True)
class SetWeights:
    """Write the route's weights: ``canary_weight`` to canary, the rest to stable, in one write."""

    stable_revision: str
    canary_revision: str | None
    canary_weight: int
    #: Header routes written with the weights, in the same write (none: the split alone).
    header_routes: frozenset[HeaderRoute] = NO_HEADER_ROUTES


@dataclass(frozen=True)
class DeleteRevision:
    """Remove a revision's Deployment and Service (no traffic points at it any more)."""

    revision: str


@dataclass(frozen=True)
class OrphanRevision:
    """Drop the owner reference of a revision's objects before the rollout goes: a user-owned
    route still sends traffic to them, so garbage collection must not take them."""

    revision: str


@dataclass(frozen=True)
class RecordEvent:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


Action = EnsureRevision | SetWeights | DeleteRevision | OrphanRevision | RecordEvent


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` returns: actions in order, the new status, when to look again, and
    the reason of a rollback decided in this call (None when it decided none): the reconciler
    records a rollback in the status *before* it moves traffic, so no crash can undo it."""

    actions: tuple[Action, ...]
    status: InferenceRolloutStatus
    requeue_after: float | None
    rolled_back: str | None = None
    #: Deleting: seconds before the rollout may go (its finalizer removed, its revisions
    #: garbage-collected). Above 0 while a revision that carried traffic is still draining.
    deletion_hold: float = 0.0
