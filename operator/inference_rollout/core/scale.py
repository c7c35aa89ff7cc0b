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
from .types import Action, EnsureRevision, Observation


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


def serving_pods(status: InferenceRolloutStatus, world: Observation,
                 actions: Iterable[Action]) -> int:
    """Pods of the serving revisions once ``actions`` are applied (their last scaling wins)."""
    pods = {rev: world.revisions[rev].desired if rev in world.revisions else 0
            for rev in serving_revisions(status)}
    for action in actions:
        if isinstance(action, EnsureRevision) and action.revision in pods:
            pods[action.revision] = action.replicas
    return sum(pods.values())
