"""How many pods each revision runs, and how much traffic Ready pods can carry.

``surge``: stable keeps ``replicas`` pods; the canary gets the pods its weight needs on top
(extra GPUs for the length of the release).
``swap``: the GPU count stays within ``replicas + maxSurge``.  Stable shrinks only by the number of
canary pods that are already Ready, and the canary grows only into the room that leaves, so the
fleet never loses serving capacity and never exceeds its quota.  The stable keeps at least one pod
until the release is promoted, also at a 100% step: a rollback, or a template change that
abandons the canary, sends all traffic back to the stable in one write, and that write must find
a warm pod (a stable at zero would take 100% on no pod for a model load's time).  The swap quota
already reserves that pod: the canary's count is cut to ``replicas + maxSurge - 1``.

``in_place`` (an adapter release, docs/adapters.md): the canary's pods are the stable's own, moved
to the new adapter set one at a time; no pod is added, whatever the mode.  Its count is the
weight's share of the fleet, and the stable keeps at least one pod until promotion for the same
reason as above (a rollback's write must find a pod of the stable set): at most all but one
(:func:`in_place_canary_pods`).  ``step.replicas`` (overdrive) does not apply: there is no pod to
add.

``replicas`` is the count an autoscaler or ``kubectl scale`` sets (the ``scale`` subresource): every
count here is computed from the current value, so a change mid-step re-splits the fleet at the
step's weight (docs/autoscaling.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..api.spec import InferenceRolloutSpec, Step


def pods_for_weight(replicas: int, weight: int) -> int:
    """Pods needed to carry ``weight`` percent of a fleet sized for ``replicas`` pods at 100%."""
    return max(1, math.ceil(replicas * weight / 100))


def in_place_canary_pods(replicas: int, weight: int) -> int:
    """An adapter release's canary pods at ``weight`` %, out of ``replicas``: a template
    release's count, at least one while the weight is above 0, and at most all but one (the
    stable set keeps a pod until promotion, also at a 100 % step).  A fleet of one cannot be
    split: 0 (the validation refuses an adapter release on fewer than 2 replicas for that
    reason)."""
    if weight <= 0 or replicas < 2:
        return 0
    return min(replicas - 1, pods_for_weight(replicas, weight))


def canary_target(spec: InferenceRolloutSpec, step: Step, in_place: bool = False) -> int:
    """The canary's pod count for a step; ``step.replicas`` overrides (deliberate overdrive).

    In swap mode the count fits the quota less the one pod the stable keeps until promotion
    (a rollback's warm pod, see the module docstring): an overdrive count written for a larger
    fleet is cut to what a fleet scaled down since can hold, never waited for until the progress
    deadline.  ``in_place``: an adapter release's count (module docstring).
    """
    if in_place:
        return in_place_canary_pods(spec.replicas, step.weight)
    wanted = step.replicas if step.replicas is not None else pods_for_weight(spec.replicas,
                                                                             step.weight)
    if spec.capacity.mode == "swap":
        return max(1, min(wanted, spec.replicas + spec.capacity.max_surge - 1))
    return wanted


def ready_enough(spec: InferenceRolloutSpec, step: Step, canary_ready: int,
                 in_place: bool = False) -> bool:
    """Whether the canary's Ready pods may carry the step's weight (never route to what cannot
    serve).  With an explicit ``step.replicas`` the user chose the ratio, so that count suffices;
    so does an adapter release's count (``in_place``), which is the step's by construction."""
    return canary_ready >= canary_target(spec, step, in_place)


def servable_share(spec: InferenceRolloutSpec, step: Step, canary_ready: int,
                   in_place: bool = False) -> int:
    """The largest weight (percent) that ``canary_ready`` pods can carry for this step."""
    if in_place and ready_enough(spec, step, canary_ready, in_place):
        return 100
    if step.replicas is not None and not in_place:
        return 100 if canary_ready >= canary_target(spec, step) else 0
    return min(100, math.floor(100 * canary_ready / spec.replicas))


def carried_weight(spec: InferenceRolloutSpec, step: Step, canary_ready: int, weight: int,
                   in_place: bool = False) -> int:
    """The part of ``weight`` that ``canary_ready`` pods can carry at this step.  With an
    explicit ``step.replicas`` (overdrive) the share scales with the Ready part of that count."""
    if step.replicas is not None and not in_place:
        return min(weight, step.weight * canary_ready // canary_target(spec, step))
    return min(weight, servable_share(spec, step, canary_ready, in_place))


@dataclass(frozen=True)
class PodCounts:
    stable: int
    canary: int


def stable_within_quota(
    spec: InferenceRolloutSpec, wanted: int, stable_desired_now: int, other_pods: int
) -> int:
    """The stable's pod count on its way to ``wanted``.  In swap mode it grows only into GPUs
    that no other revision holds (``other_pods``: an abandoned canary, or an old stable, keeps its
    pods until it is deleted); it is never shrunk to make room for them."""
    if spec.capacity.mode == "surge" or wanted <= stable_desired_now:
        return wanted
    free = spec.replicas + spec.capacity.max_surge - other_pods
    return max(stable_desired_now, min(wanted, free))


def release_pod_counts(
    spec: InferenceRolloutSpec,
    step: Step,
    canary_ready: int,
    stable_desired_now: int,
    other_pods: int = 0,
    in_place: bool = False,
) -> PodCounts:
    """Desired pods for stable and canary while a release is at ``step``.

    ``stable_desired_now`` is the stable Deployment's current ``spec.replicas``.  In swap mode the
    canary may use the room the stable gives back: the caller writes whichever of the two shrinks
    first, so every write stays within the quota (and the result does not depend on whether the
    stable's last write has been observed yet, which keeps the decision a fixed point).
    ``other_pods`` are held by revisions that are neither (they count against the swap quota
    until they are gone).  The stable keeps at least one pod (see the module docstring).
    ``in_place`` (an adapter release): the stable's count is the fleet, which its Deployment
    keeps; the canary's pods are carved out of it (module docstring).
    """
    target = canary_target(spec, step, in_place)
    if spec.capacity.mode == "surge" or in_place:
        return PodCounts(stable=spec.replicas, canary=target)
    quota = spec.replicas + spec.capacity.max_surge - other_pods
    wanted = max(1, spec.replicas - min(target, canary_ready))
    stable = stable_within_quota(spec, wanted, stable_desired_now, other_pods)
    room = quota - stable
    # Ready canary pods are never taken away for room (they may carry traffic).
    return PodCounts(stable=stable, canary=max(0, min(target, max(room, canary_ready))))
