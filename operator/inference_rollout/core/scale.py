"""What the ``scale`` subresource reports: the serving revisions' pods and their label selector.

``kubectl scale``, an HPA and a KEDA ScaledObject write ``spec.replicas`` through the subresource
and read back ``status.replicas`` (the current count) and ``status.selector`` (which pods are the
rollout's; an HPA refuses to act without one).  Both describe the revisions that serve, stable and
canary: an old revision waiting for its ``scaleDownDelay`` carries no traffic, so its pods are
neither counted nor selected.  The count is the one this decision's writes leave, so the status
written with them agrees with the Deployments the next read sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..api import LABEL_REVISION, LABEL_ROLLOUT
from ..api.status import InferenceRolloutStatus
from .serving_versions import in_place
from .types import Action, DeleteRevision, EnsureRevision, Observation


def serving_revisions(status: InferenceRolloutStatus) -> list[str]:
    return sorted({rev for rev in (status.stable_revision, status.canary_revision) if rev})


def serving_selector(rollout: str, status: InferenceRolloutStatus,
                     templates: Mapping[str, str] | None = None) -> str:
    """``<rollout label>=NAME,<revision label> in (a,b)`` in the API server's selector syntax;
    only the rollout label before the first revision exists ("" without a name).  With
    adapters (``templates``: serving version -> template hash) the pods are labelled by their
    template, which the selector names instead (once, for two versions on one template)."""
    if not rollout:
        return ""
    known = templates or {}
    revisions = sorted({known.get(rev, rev) for rev in serving_revisions(status)})
    selector = f"{LABEL_ROLLOUT}={rollout}"
    return f"{selector},{LABEL_REVISION} in ({','.join(revisions)})" if revisions else selector


def pods_after(world: Observation, actions: Iterable[Action],
               stable: str | None = None) -> dict[str, int]:
    """Each revision's pods once ``actions`` are applied (their last scaling or deletion wins):
    what the next read sees, and the same whether or not some of them were applied already.
    A serving version in place on ``stable``'s pods (an adapter release) has none of its own:
    its pods are counted once, as the stable's."""
    pods = {rev: state.desired for rev, state in world.revisions.items()}
    for action in actions:
        if isinstance(action, EnsureRevision):
            pods[action.revision] = action.replicas
        elif isinstance(action, DeleteRevision):
            pods[action.revision] = 0
    return {rev: 0 if in_place(world.templates, stable, rev) else n for rev, n in pods.items()}


def serving_pods(status: InferenceRolloutStatus, world: Observation,
                 actions: Iterable[Action]) -> int:
    """Pods of the serving revisions once ``actions`` are applied."""
    pods = pods_after(world, actions, status.stable_revision)
    return sum(pods.get(rev, 0) for rev in serving_revisions(status))
