"""What the ``scale`` subresource reports: the serving revisions' pods and their label selector.

``kubectl scale``, an HPA and a KEDA ScaledObject write ``spec.replicas`` through the subresource
and read back ``status.replicas`` (the current count) and ``status.selector`` (which pods are the
rollout's; an HPA refuses to act without one).  Both describe the revisions that serve, stable and
canary: an old revision waiting for its ``scaleDownDelay`` carries no traffic, so its pods are
neither counted nor selected.  The count is the one this decision's writes leave, so the status
written with them agrees with the Deployments the next read sees.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..api import LABEL_REVISION, LABEL_ROLLOUT
from ..api.status import InferenceRolloutStatus
from .types import Action, DeleteRevision, EnsureRevision, Observation


def serving_revisions(status: InferenceRolloutStatus) -> list[str]:
    return sorted({rev for rev in (status.stable_revision, status.canary_revision) if rev})


def serving_selector(rollout: str, status: InferenceRolloutStatus) -> str:
    """``<rollout label>=NAME,<revision label> in (a,b)`` in the API server's selector syntax;
    only the rollout label before the first revision exists ("" without a name)."""
    if not rollout:
        return ""
    revisions = serving_revisions(status)
    selector = f"{LABEL_ROLLOUT}={rollout}"
    return f"{selector},{LABEL_REVISION} in ({','.join(revisions)})" if revisions else selector


def pods_after(world: Observation, actions: Iterable[Action]) -> dict[str, int]:
    """Each revision's pods once ``actions`` are applied (their last scaling or deletion wins):
    what the next read sees, and the same whether or not some of them were applied already."""
    pods = {rev: state.desired for rev, state in world.revisions.items()}
    for action in actions:
        if isinstance(action, EnsureRevision):
            pods[action.revision] = action.replicas
        elif isinstance(action, DeleteRevision):
            pods[action.revision] = 0
    return pods


def serving_pods(status: InferenceRolloutStatus, world: Observation,
                 actions: Iterable[Action]) -> int:
    """Pods of the serving revisions once ``actions`` are applied."""
    pods = pods_after(world, actions)
    return sum(pods.get(rev, 0) for rev in serving_revisions(status))
