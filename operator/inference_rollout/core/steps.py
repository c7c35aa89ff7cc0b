"""Which step of ``spec.strategy.steps`` a release is at, when the list may have been edited.

The steps are spec, the index is status: a user (or git) may shorten the list in the middle of
a release, leaving the stored index past its end.  Everything that looks up the current step goes
through here, so an edited list never crashes a reconcile; :func:`fit_index` says where the
release continues.
"""

from __future__ import annotations

from ..api.spec import InferenceRolloutSpec, Step
from ..api.status import InferenceRolloutStatus


def current_step(spec: InferenceRolloutSpec, status: InferenceRolloutStatus) -> Step | None:
    """The release's step, clamped to the last one if the list shrank; None outside a release."""
    if status.current_step is None:
        return None
    steps = spec.strategy.steps
    return steps[min(status.current_step, len(steps) - 1)]


def fit_index(spec: InferenceRolloutSpec, status: InferenceRolloutStatus) -> int | None:
    """Where a release whose stored index is past the end of the (shortened) list continues:
    the first step whose weight is at least the canary's weight now, so traffic is neither
    lowered nor raised past a step the user still wants watched.  None when the index fits."""
    index, steps = status.current_step, spec.strategy.steps
    if index is None or index < len(steps):
        return None
    return next((i for i, s in enumerate(steps) if s.weight >= status.canary_weight),
                len(steps) - 1)


def testers_step(step: Step | None) -> bool:
    """A step of weight 0 (spec.traffic.testers required): only the testers reach the canary."""
    return step is not None and step.weight == 0


def carries_traffic(spec: InferenceRolloutSpec, status: InferenceRolloutStatus) -> bool:
    """The canary answers someone whose requests the analysis may judge: a weighted share, or
    the testers once a testers' step's hold has begun (its header route served)."""
    if status.canary_revision is None:
        return False
    if status.canary_weight > 0:
        return True
    return testers_step(current_step(spec, status)) and status.step_started_at is not None
