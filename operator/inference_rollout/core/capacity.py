"""How many pods each revision runs, and how much traffic Ready pods can carry.

``surge``: stable keeps ``replicas`` pods; the canary gets the pods its weight needs on top
(extra GPUs for the length of the release).
``swap``: the GPU count stays within ``replicas + maxSurge``.  Stable shrinks only by the number of
canary pods that are already Ready, and the canary grows only into the room that leaves, so the
fleet never loses serving capacity and never exceeds its quota.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..api.spec import InferenceRolloutSpec, Step


def pods_for_weight(replicas: int, weight: int) -> int:
    """Pods needed to carry ``weight`` percent of a fleet sized for ``replicas`` pods at 100%."""
    return max(1, math.ceil(replicas * weight / 100))


def canary_target(spec: InferenceRolloutSpec, step: Step) -> int:
    """The canary's pod count for a step; ``step.replicas`` overrides (deliberate overdrive)."""
    if step.replicas is not None:
        return step.replicas
    return pods_for_weight(spec.replicas, step.weight)


def ready_enough(spec: InferenceRolloutSpec, step: Step, canary_ready: int) -> bool:
    """Whether the canary's Ready pods may carry the step's weight (never route to what cannot
    serve).  With an explicit ``step.replicas`` the user chose the ratio, so that count suffices."""
    return canary_ready >= canary_target(spec, step)


def servable_share(spec: InferenceRolloutSpec, step: Step, canary_ready: int) -> int:
    """The largest weight (percent) that ``canary_ready`` pods can carry for this step."""
    if step.replicas is not None:
        return 100 if canary_ready >= step.replicas else 0
    return min(100, math.floor(100 * canary_ready / spec.replicas))


@dataclass(frozen=True)
class PodCounts:
    stable: int
    canary: int


def release_pod_counts(
    spec: InferenceRolloutSpec, step: Step, canary_ready: int, stable_desired_now: int
) -> PodCounts:
    """Desired pods for stable and canary while a release is at ``step``.

    ``stable_desired_now`` is the stable Deployment's current ``spec.replicas``: in swap mode the
    canary may only use room the stable has already given back.
    """
    target = canary_target(spec, step)
    if spec.capacity.mode == "surge":
        return PodCounts(stable=spec.replicas, canary=target)
    quota = spec.replicas + spec.capacity.max_surge
    stable = max(0, spec.replicas - min(target, canary_ready))
    room = quota - max(stable, min(stable_desired_now, spec.replicas))
    return PodCounts(stable=stable, canary=max(0, min(target, room)))
