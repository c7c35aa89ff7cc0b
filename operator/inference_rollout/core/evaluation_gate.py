"""The business evaluation gate (Principle 11), pure: when to run it and what a run means.

With ``spec.evaluation`` set, a release's first traffic shift (weight 0 → the step's weight)
waits until the evaluation set has been run against the canary's and the stable's Services and
the result is recorded in ``status.evaluation`` for the current canary revision:

* it is due once per canary revision, once the canary has enough Ready pods for the step it
  waits at (the same rule that lets the weight rise);
* an error (ConfigMap missing or malformed, a Service unreachable) never passes: it is retried
  after ``spec.analysis.interval``, and after ``consecutiveErrorLimit`` errors in a row it follows
  ``onErrorLimit`` (pause by default, as the analysis does);
* the canary more than ``maxDropPoints`` below the stable fails: the release is rolled back;
* a run is recorded as begun (``status.evaluationRunning``) before it starts: one the operator
  never finished (it restarted, or was killed for memory during the run) is an error like any
  other, retried after the interval, so a run that kills the operator ends at the error limit
  instead of killing every successor at once.

The I/O (reading the ConfigMap, calling the Services, scoring) is in
:mod:`inference_rollout.evaluation`; the reconciler runs it when :func:`evaluation_due` says so
and passes the outcome in :attr:`Observation.evaluation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal

from ..api import reasons as r
from ..api.spec import InferenceRolloutSpec
from ..api.status import EvaluationResult, EvaluationRun, InferenceRolloutStatus
from .capacity import ready_enough
from .serving_versions import in_place
from .steps import current_step
from .timeutil import from_iso, to_iso
from .types import EvaluationOutcome, RevisionState


def current(status: InferenceRolloutStatus) -> EvaluationResult | None:
    """The recorded evaluation if it belongs to the current canary revision."""
    ev = status.evaluation
    if ev is None or status.canary_revision is None or ev.revision != status.canary_revision:
        return None
    return ev


def passed(spec: InferenceRolloutSpec, status: InferenceRolloutStatus) -> bool:
    """Whether the canary may receive traffic as far as the gate is concerned."""
    if spec.evaluation is None:
        return True
    ev = current(status)
    return ev is not None and ev.verdict == "Pass"


def waiting(spec: InferenceRolloutSpec, status: InferenceRolloutStatus) -> bool:
    """The gate holds the canary at 0%."""
    return (spec.evaluation is not None and status.canary_revision is not None
            and not status.aborted and status.canary_weight == 0 and not passed(spec, status))


def retry_in(spec: InferenceRolloutSpec, status: InferenceRolloutStatus, now: datetime) -> float:
    """Seconds until an errored evaluation is due again (0: due now, or never ran)."""
    ev = current(status)
    if ev is None or ev.verdict != "Error":
        return 0.0
    at = from_iso(ev.measured_at)
    if at is None:
        return 0.0
    return max(0.0, spec.analysis.interval_seconds - (now - at).total_seconds())


def evaluation_due(spec: InferenceRolloutSpec, status: InferenceRolloutStatus, now: datetime,
                   revisions: Mapping[str, RevisionState],
                   templates: Mapping[str, str] | None = None) -> bool:
    """Whether the reconciler should run the evaluation set before calling ``decide``.
    ``templates``: as ``Observation.templates`` (an adapter release's canary is sized in place)."""
    if not waiting(spec, status) or status.current_step is None:
        return False
    if status.paused_reason == r.EVALUATION_ERROR_LIMIT:
        return False  # a person should look first; resume runs it again
    assert status.canary_revision is not None
    canary = revisions.get(status.canary_revision)
    step = current_step(spec, status)
    if step is None or not ready_enough(spec, step, canary.ready if canary else 0,
                                        in_place(templates or {}, status.stable_revision,
                                                 status.canary_revision)):
        return False
    if status.evaluation_running is not None:
        return False  # begun and never recorded: decide counts it as an error (interrupted)
    ev = current(status)
    if ev is None:
        return True
    return ev.verdict == "Error" and retry_in(spec, status, now) <= 0


def begun(status: InferenceRolloutStatus, now: datetime) -> InferenceRolloutStatus:
    """The status to write before the evaluation runs: a process that dies during the run (an
    evaluation holds replies in memory; five at once took the operator past its memory limit)
    leaves this behind, and its successor counts the run as an error instead of starting it
    again at once."""
    assert status.canary_revision is not None
    out = status.model_copy(deep=True)
    out.evaluation_running = EvaluationRun(revision=status.canary_revision,
                                           started_at=to_iso(now))
    return out


def interrupted(status: InferenceRolloutStatus) -> EvaluationOutcome | None:
    """The error outcome of an evaluation begun and never recorded, for the current canary."""
    run = status.evaluation_running
    if run is None or run.revision != status.canary_revision:
        return None
    return EvaluationOutcome(run.revision, error=(
        f"interrupted: the operator stopped while the evaluation begun at {run.started_at} ran "
        "(restarted, or killed for memory: see its restarts and memory limit)"))


Outcome = Literal["Pass", "Fail", "Error", "ErrorLimit"]


def record(spec: InferenceRolloutSpec, status: InferenceRolloutStatus,
           outcome: EvaluationOutcome, now: datetime) -> Outcome | None:
    """Write ``outcome`` into ``status.evaluation``; return its meaning, or None when it does not
    apply (another revision's, or the gate was already decided: recording is idempotent)."""
    ev = spec.evaluation
    status.evaluation_running = None  # recorded, or no longer this canary's
    if ev is None or not waiting(spec, status) or outcome.revision != status.canary_revision:
        return None
    before = current(status)
    if before is not None and before.verdict != "Error":
        return None
    if outcome.error is not None or outcome.canary_score is None or outcome.stable_score is None:
        errors = (before.consecutive_errors if before is not None else 0) + 1
        status.evaluation = EvaluationResult(
            revision=outcome.revision, canary_score=outcome.canary_score,
            stable_score=outcome.stable_score, verdict="Error", measured_at=to_iso(now),
            message=outcome.error or "no score", consecutive_errors=errors)
        return "ErrorLimit" if errors >= spec.analysis.consecutive_error_limit else "Error"
    fail = outcome.canary_score < outcome.stable_score - ev.max_drop_points
    verdict: Literal["Pass", "Fail"] = "Fail" if fail else "Pass"
    status.evaluation = EvaluationResult(
        revision=outcome.revision, canary_score=round(outcome.canary_score, 2),
        stable_score=round(outcome.stable_score, 2), verdict=verdict, measured_at=to_iso(now),
        message=(f"canary {outcome.canary_score:.1f} vs stable {outcome.stable_score:.1f} points "
                 f"over {outcome.cases} cases (max drop {ev.max_drop_points:g})"
                 + (f"; {outcome.detail}" if outcome.detail else "")))
    return verdict


def reset_errors(status: InferenceRolloutStatus) -> None:
    """On resume: the error count starts again (the next run is due at once)."""
    ev = status.evaluation
    if ev is not None and ev.verdict == "Error":
        status.evaluation = ev.model_copy(update={"consecutive_errors": 0, "measured_at": None})
