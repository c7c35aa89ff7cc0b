"""What a release costs, counted as it runs (issue 33, item 4): the numbers platform teams are
asked for and no rollout controller reports.

:func:`account` runs at the end of every decision with the status it made, and keeps
``status.releaseCost`` for the current release (and the last one until the next begins):

* **pod- and GPU-seconds beyond the steady state**: the pods of every revision above
  ``spec.replicas`` (canary and surge pods, and those kept draining after the outcome), times
  the seconds, times the GPUs each pod asks for (``nvidia.com/gpu``). Each interval between two
  reconciles is charged for the pods the first one's writes left (the Deployments' replicas,
  not pods Running: a pod loading its model holds its GPU too); a pod that a controller adds or
  removes on its own is seen at the next reconcile (reconciles run every few seconds during a
  release).
* **pods started**: each rise of the canary Deployment's replicas, i.e. the model loads the
  release asked for (a pod the ReplicaSet replaces after a crash is not seen).
* **canary requests**: those the analysis counted, each step's evidence period (its weight in
  force until its last look), the largest count among the count-based metrics; so it undercounts
  the moments between a weight write and the gateway's acceptance, and after the last look.
  ``rolledBackRequests``: the same, when the canary was rolled back.
* **time**: from the template change to each step's weight in force, and to the outcome.
* **probes** (``spec.analysis.probes``): the operator's own requests to canary and stable, and
  their answer time summed.

Pure: it reads the decision's input and output, never the clock or the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from ..api import reasons as r
from ..api.duration import format_duration
from ..api.spec import InferenceRolloutSpec, PodTemplate
from ..api.status import InferenceRolloutStatus, ReleaseCost
from .scale import pods_after
from .serving_versions import shares_pods
from .timeutil import from_iso, to_iso
from .types import Action, Observation

GPU_RESOURCE = "nvidia.com/gpu"


def gpus_per_pod(template: PodTemplate) -> int:
    """The GPUs a pod of this template asks for: every container's ``nvidia.com/gpu`` limit
    (a request alone counts where no limit is set)."""
    total = 0
    for c in template.spec.get("containers") or []:
        resources = c.get("resources") or {} if isinstance(c, dict) else {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE,
                                                    (resources.get("requests") or {})
                                                    .get(GPU_RESOURCE, 0))
        try:
            total += int(str(value))
        except ValueError:
            continue
    return total


def _seconds(since: str, now: datetime) -> float:
    start = from_iso(since)
    return 0.0 if start is None else round(max(0.0, (now - start).total_seconds()), 3)


def account(spec: InferenceRolloutSpec, after: InferenceRolloutStatus, world: Observation,
            actions: Iterable[Action], now: datetime
            ) -> tuple[ReleaseCost | None, ReleaseCost | None]:
    """``(the cost record to keep in the status, a record that ended in this decision or
    None)``.  The ended one is told once (an Event): it is returned only by the decision that
    gave it its outcome.  ``actions``: the decision's; the pods it leaves are what the next
    interval is charged for (so a decision made again after a crash, with some of its actions
    already applied, records exactly the same)."""
    pods = pods_after(world, actions, after.stable_revision)
    cost = after.release_cost
    canary = after.canary_revision
    ended: ReleaseCost | None = None
    if cost is not None:
        cost = cost.model_copy(deep=True)
        _charge(cost, spec, pods, now)
        if cost.outcome is None:
            _progress(cost, after, pods, world.templates, now)
            _probes(cost, world)
            # Rolled back: the canary stays named (Degraded) until the template changes.
            if canary != cost.revision or after.aborted:
                cost = ended = _ended(cost, after, now)
    # A new release, or the same revision released again (a retry after its rollback).
    again = cost is not None and cost.outcome is not None and not after.aborted
    if canary is not None and (cost is None or cost.revision != canary or again):
        cost = ReleaseCost(revision=canary, started_at=after.step_entered_at or to_iso(now),
                           accounted_at=to_iso(now))
        _charge(cost, spec, pods, now)
        _progress(cost, after, pods, world.templates, now)
        _probes(cost, world)
    return cost, ended


def _probes(cost: ReleaseCost, world: Observation) -> None:
    """The probes' requests and serving seconds so far (they count up while the canary is
    probed; a restarted operator's probes count from zero again, so the larger is kept)."""
    p = world.probes
    if p is not None and p.canary == cost.revision:
        cost.probe_requests = max(cost.probe_requests, p.requests)
        cost.probe_seconds = max(cost.probe_seconds, p.seconds)


def _ended(cost: ReleaseCost, after: InferenceRolloutStatus, now: datetime) -> ReleaseCost:
    if after.stable_revision == cost.revision:
        cost.outcome = "Promoted"
    elif after.aborted:
        cost.outcome = "RolledBack"
        cost.rolled_back_requests = cost.canary_requests
    else:
        cost.outcome = "Replaced"
    cost.decided_after = _seconds(cost.started_at, now)
    return cost


def _charge(cost: ReleaseCost, spec: InferenceRolloutSpec, pods: dict[str, int],
            now: datetime) -> None:
    """Charge the interval since the last decision for the pods beyond the steady state that
    decision left; then note the ones this one leaves for the next interval."""
    extra = max(0, sum(pods.values()) - spec.replicas)
    if cost.outcome is not None and cost.extra_pods == 0 and extra == 0:
        return  # ended and drained: the record is final (no status write per reconcile)
    last = from_iso(cost.accounted_at)
    if last is not None and now > last:
        seconds = (now - last).total_seconds()
        cost.pod_seconds = round(cost.pod_seconds + cost.extra_pods * seconds, 3)
        cost.gpu_seconds = round(
            cost.gpu_seconds + cost.extra_pods * seconds * gpus_per_pod(spec.template), 3)
    cost.accounted_at = to_iso(now)
    cost.extra_pods = extra


def _progress(cost: ReleaseCost, after: InferenceRolloutStatus, pods: dict[str, int],
              templates: Mapping[str, str], now: datetime) -> None:
    """Steps reached, pods started and requests counted while the release runs.  An adapter
    release's version shares its template's pods with the stable (``shares_pods``): it starts
    none, also when promotion makes it their owner."""
    desired = 0 if shares_pods(templates, cost.revision) else pods.get(cost.revision, 0)
    cost.pods_started += max(0, desired - cost.canary_desired)
    cost.canary_desired = desired
    live = after.canary_revision == cost.revision
    if live and after.step_started_at and after.current_step == len(cost.steps_reached_after):
        cost.steps_reached_after.append(_seconds(cost.started_at, now))
    # Each metric's count is of the step it was measured in (restartStep): the largest per step.
    for result in after.analysis.values():
        step = result.restart_step
        if step is not None and result.requests is not None:
            cost.step_requests[step] = max(cost.step_requests.get(step, 0.0), result.requests)
    cost.canary_requests = round(sum(cost.step_requests.values()), 3)


def summary(cost: ReleaseCost) -> str:
    """The ``ReleaseCost`` Event's message: the record, in one line."""
    rolled_back = (f", {cost.rolled_back_requests:.0f} of them answered by a canary then rolled "
                   "back" if cost.outcome == "RolledBack" else "")
    return r.RELEASE_COST_MSG.format(
        revision=cost.revision, outcome=cost.outcome or "InProgress",
        decided=format_duration(cost.decided_after or 0.0),
        pod_seconds=f"{cost.pod_seconds:.0f}", gpu_seconds=f"{cost.gpu_seconds:.0f}",
        pods=cost.pods_started, requests=f"{cost.canary_requests:.0f}", rolled_back=rolled_back,
        probes=(f", {cost.probe_requests} probe requests ({cost.probe_seconds:.0f} serving "
                "seconds)" if cost.probe_requests else ""),
        steps=", ".join(format_duration(s) for s in cost.steps_reached_after) or "none")
