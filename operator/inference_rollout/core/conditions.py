"""Phase, conditions and the one-line message, all derived from the status and the world.

Derived, never stored independently: the phase is a function of the state, so it cannot disagree
with it after a restart.  A condition's ``lastTransitionTime`` changes only when its status does.
"""

from __future__ import annotations

from datetime import datetime

from ..api import reasons as r
from ..api.duration import format_duration
from ..api.spec import InferenceRolloutSpec
from ..api.status import Condition, ConditionStatus, InferenceRolloutStatus, Phase
from .route_gate import condition as route_condition
from .steps import current_step
from .timeutil import seconds_since, to_iso
from .types import Observation
from .verdicts import summarise


def set_condition(
    status: InferenceRolloutStatus,
    type_: str,
    value: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> None:
    previous = next((c for c in status.conditions if c.type == type_), None)
    since = previous.last_transition_time if previous and previous.status == value else to_iso(now)
    new = Condition(
        type=type_, status=value, reason=reason, message=message,
        last_transition_time=since, observed_generation=generation,
    )
    status.conditions = [c for c in status.conditions if c.type != type_] + [new]
    status.conditions.sort(key=lambda c: c.type)


def derive_phase(
    spec: InferenceRolloutSpec, status: InferenceRolloutStatus, world: Observation
) -> Phase:
    if world.invalid or status.aborted:
        return "Degraded"
    if status.paused_reason:
        return "Paused"
    stable = world.revisions.get(status.stable_revision or "")
    if status.canary_revision or stable is None or stable.ready < spec.replicas:
        return "Progressing"
    return "Healthy"


def step_message(
    spec: InferenceRolloutSpec, status: InferenceRolloutStatus, now: datetime
) -> str:
    """``step 2/4: 20% for 3m12s of 24h; slo-ttft-p99 0.21 (Pass: ≤ 0.45)``."""
    if status.current_step is None:
        return ""
    steps = spec.strategy.steps
    step = current_step(spec, status)
    assert step is not None
    head = f"step {status.current_step + 1}/{len(steps)}: "
    held = seconds_since(status.step_started_at, now)
    if step.weight == 0:  # a testers' step (core/steps.py)
        hold = format_duration(step.hold_seconds) if step.pause else "no hold"
        head += ("testers only (waiting for canary pods and the testers' route)" if held is None
                 else f"testers only for {format_duration(max(held, 0))} of {hold}")
    elif status.canary_weight < step.weight:
        head += f"{status.canary_weight}% → {step.weight}% (waiting for canary pods)"
    elif held is None:
        head += f"{step.weight}% written (waiting for the gateway to accept the route)"
    else:
        hold = format_duration(step.hold_seconds) if step.pause else "no hold"
        head += f"{step.weight}% for {format_duration(max(held, 0))} of {hold}"
    names = [m.name for m in spec.analysis.effective_metrics]
    tail = summarise(status.analysis, names)
    return f"{head}; {tail}" if tail else head


def apply_conditions(
    spec: InferenceRolloutSpec,
    status: InferenceRolloutStatus,
    world: Observation,
    now: datetime,
) -> None:
    """Write Valid, Available, Progressing, Paused, Aborted and RouteAccepted (the gateway's
    view of the route, unless ``routeStatus: Ignored``), and the phase."""
    gen = world.generation

    def put(t: str, v: ConditionStatus, reason: str, msg: str) -> None:
        set_condition(status, t, v, reason, msg, now, gen)

    if world.invalid:
        put("Valid", "False", r.INVALID_SPEC,
            r.INVALID_SPEC_MSG.format(problems="; ".join(world.invalid)))
    else:
        put("Valid", "True", r.SPEC_VALID, r.SPEC_VALID_MSG)

    stable = world.revisions.get(status.stable_revision or "")
    if stable is not None and stable.ready > 0:
        put("Available", "True", r.STABLE_AVAILABLE, r.STABLE_AVAILABLE_MSG.format(
            revision=status.stable_revision, ready=stable.ready, replicas=spec.replicas))
    else:
        put("Available", "False", r.STABLE_UNAVAILABLE,
            r.STABLE_UNAVAILABLE_MSG.format(revision=status.stable_revision or "(none)"))

    if status.aborted:
        put("Aborted", "True", status.abort_reason or r.ABORT_REQUESTED, status.message)
    else:
        put("Aborted", "False", "NotAborted", "")

    if status.paused_reason:
        put("Paused", "True", status.paused_reason, status.message)
    else:
        put("Paused", "False", "NotPaused", "")

    if status.canary_revision and not status.aborted:
        put("Progressing", "True", r.STEP_WEIGHT_SET, status.message)
    else:
        put("Progressing", "False", r.RELEASE_COMPLETE,
            r.RELEASE_COMPLETE_MSG.format(revision=status.stable_revision or "(none)"))

    route = route_condition(spec, world.route_acceptance)
    if route is not None:
        put(r.ROUTE_ACCEPTED, *route)

    if any(c.type == r.RECONCILE_FAILED for c in status.conditions):
        put(r.RECONCILE_FAILED, "False", r.RECONCILED, r.RECONCILED_MSG)

    status.phase = derive_phase(spec, status, world)
    status.observed_generation = gen
