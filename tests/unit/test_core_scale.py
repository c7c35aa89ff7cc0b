"""Scaling a rollout (``kubectl scale``, an HPA, KEDA) before, during and after a release.

The scale subresource writes ``spec.replicas``; the core splits that count between the revisions
at the current step's weight, re-splits it when it changes mid-step, and reports the serving pods
and their selector in the status (core/scale.py).  A change of count is no release and restarts
no step.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.coresim import Sim, manifest_spec, started

from inference_rollout.api import LABEL_REVISION, LABEL_ROLLOUT
from inference_rollout.api import reasons as r
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.scale import serving_pods, serving_selector
from inference_rollout.core.types import (
    EnsureRevision,
    Observation,
    RecordEvent,
    RevisionState,
)

#: Revisions as the status records them (ten hex characters of the template hash).
STABLE, CANARY = "aaaaaaaaaa", "bbbbbbbbbb"

STEPS = {"steps": [{"weight": 20, "pause": "10m"}, {"weight": 50, "pause": "10m"},
                   {"weight": 100}]}


def at_weight(weight: int, mode: str = "surge", replicas: int = 5) -> tuple[Sim, str, str]:
    """A release holding ``weight`` (its first step, 20%, or the second, 50%)."""
    sim = started(manifest_spec(replicas=replicas, strategy=STEPS,
                                capacity={"mode": mode, "maxSurge": 1}))
    old = sim.stable
    assert old is not None
    new = sim.release("m2")
    sim.run_until(lambda s: s.status.canary_weight == 20)
    if weight == 50:
        sim.reconcile(promote=True)
        sim.run_until(lambda s: s.status.canary_weight == 50)
    assert sim.status.canary_weight == weight
    sim.run(5)  # settled: every pod the split asks for is Ready
    return sim, old, new


def pods(sim: Sim) -> dict[str, tuple[int, int]]:
    return {rev: (s.desired, s.ready) for rev, s in sim.world.deployments.items()}


def step_fields(status: InferenceRolloutStatus) -> tuple[Any, ...]:
    return (status.canary_revision, status.current_step, status.canary_weight,
            status.step_entered_at, status.step_started_at, status.aborted)


# --- the status the scale subresource reads ---------------------------------------------------


def test_status_reports_serving_pods_and_selector_of_both_revisions() -> None:
    sim, old, new = at_weight(20, replicas=5)
    assert pods(sim) == {old: (5, 5), new: (1, 1)}
    assert sim.status.replicas == 6
    first, second = sorted((old, new))
    assert sim.status.selector == (
        f"{LABEL_ROLLOUT}=chat,{LABEL_REVISION} in ({first},{second})")


def test_selector_leaves_out_a_revision_waiting_to_be_deleted() -> None:
    sim, old, new = at_weight(50, replicas=4)
    sim.reconcile(promote_full=True)
    sim.run_until(lambda s: s.status.stable_revision == new)
    assert old in sim.world.deployments  # it keeps its pods for scaleDownDelay
    assert sim.status.selector == f"{LABEL_ROLLOUT}=chat,{LABEL_REVISION} in ({new})"
    assert sim.status.replicas == 4


def test_pods_counted_are_the_ones_this_decisions_writes_leave() -> None:
    status = InferenceRolloutStatus(stable_revision=STABLE, canary_revision=CANARY)
    world = Observation(generation=1, template_hash=CANARY, revisions={
        STABLE: RevisionState(4, 4, 4), CANARY: RevisionState(1, 0, 0),
        "old": RevisionState(3, 3, 3)})
    assert serving_pods(status, world, ()) == 5
    assert serving_pods(status, world, (EnsureRevision(CANARY, 2), EnsureRevision("old", 9))) == 6
    assert serving_selector("", status) == ""
    assert serving_selector("x", InferenceRolloutStatus()) == f"{LABEL_ROLLOUT}=x"


# --- scaling during a release ------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "after"), [
    # surge: the stable keeps the whole count, the canary its share on top
    ("surge", {"stable": (10, 10), "canary": (2, 2)}),
    # swap: the canary's share (ceil) and the rest on the stable, within replicas + maxSurge
    ("swap", {"stable": (8, 8), "canary": (2, 2)}),
])
def test_a_scale_up_mid_step_grows_both_revisions_and_keeps_the_step(
        mode: str, after: dict[str, tuple[int, int]]) -> None:
    sim, old, new = at_weight(20, mode=mode, replicas=5)
    before = step_fields(sim.status)
    sim.scale(10)
    d = sim.reconcile()
    assert not [a for a in d.actions if isinstance(a, RecordEvent)
                and a.reason in (r.NEW_RELEASE, r.STEP_WEIGHT_SET, r.STEPS_CHANGED)]
    sim.run(10)
    assert step_fields(sim.status) == before  # same revision, same step, same hold
    assert pods(sim) == {old: after["stable"], new: after["canary"]}
    assert sim.status.replicas == after["stable"][0] + after["canary"][0]
    if mode == "swap":
        assert sum(s.desired for s in sim.world.deployments.values()) <= 10 + 1


@pytest.mark.parametrize("mode", ["surge", "swap"])
def test_a_scale_down_mid_step_shrinks_both_to_their_shares(mode: str) -> None:
    sim, old, new = at_weight(50, mode=mode, replicas=8)
    assert pods(sim)[new] == (4, 4)
    before = step_fields(sim.status)
    sim.scale(2)
    sim.run(10)
    assert step_fields(sim.status) == before
    assert pods(sim) == {old: (2, 2) if mode == "surge" else (1, 1), new: (1, 1)}


@pytest.mark.parametrize("mode", ["surge", "swap"])
def test_a_scale_down_never_takes_the_last_pod_of_a_revision_with_traffic(mode: str) -> None:
    """At 20% of one replica the canary needs its one pod and the stable, carrying 80%, keeps
    its one pod too (in swap mode the surge slot holds the canary's)."""
    sim, old, new = at_weight(20, mode=mode, replicas=6)
    sim.scale(1)
    for d in sim.run(10):
        for a in d.actions:
            if isinstance(a, EnsureRevision):
                assert a.replicas >= 1, a
    assert pods(sim) == {old: (1, 1), new: (1, 1)}
    assert sim.status.canary_weight == 20


def test_swap_with_one_replica_keeps_the_stable_pod_while_it_carries_traffic() -> None:
    """Before: the canary's one Ready pod 'replaced' the stable's only one at 20%, and the
    stable carried 80% on no pod at all."""
    sim = started(manifest_spec(replicas=1, strategy=STEPS,
                                capacity={"mode": "swap", "maxSurge": 1}))
    old = sim.stable
    new = sim.release("m2")
    sim.run_until(lambda s: s.status.canary_weight == 20)
    sim.run(5)
    assert pods(sim) == {old: (1, 1), new: (1, 1)}
    sim.reconcile(promote_full=True)
    sim.run_until(lambda s: s.status.stable_revision == new)
    sim.run(2)
    assert sim.world.deployments[new].desired == 1


def test_scale_up_at_the_step_boundary_needs_the_new_share_before_the_next_weight() -> None:
    """Scaled from 4 to 8 at 20%: the 50% step waits for 4 Ready canary pods, not 2."""
    sim, _, new = at_weight(20, replicas=4)
    sim.scale(8)
    sim.world.auto_ready = False
    sim.reconcile(promote=True)
    sim.run(5)
    assert sim.status.current_step == 1 and sim.status.canary_weight == 20
    assert sim.world.deployments[new].desired == 4
    sim.world.set_ready(new, 3)
    sim.run(3)
    assert sim.status.canary_weight == 20
    sim.world.set_ready(new, 4)
    sim.run(3)
    assert sim.status.canary_weight == 50


def test_rollback_after_a_scale_up_leaves_the_stable_with_the_full_count() -> None:
    sim, old, new = at_weight(20, mode="swap", replicas=3)
    sim.scale(6)
    sim.run(5)
    sim.reconcile(abort=True)
    sim.run(60)  # past abortScaleDownDelay
    assert sim.status.aborted
    assert pods(sim) == {old: (6, 6), new: (0, 0)}
    assert sim.world.route == {old: 100, new: 0}
    assert sim.status.replicas == 6


def test_scaling_with_no_release_scales_the_stable() -> None:
    sim = started(manifest_spec(replicas=2))
    sim.scale(7)
    sim.run(4)
    assert pods(sim) == {sim.stable: (7, 7)}
    assert sim.status.phase == "Healthy" and sim.status.replicas == 7


def test_an_adapter_canary_on_the_stables_pods_is_counted_and_selected_once() -> None:
    """An adapter release's two serving versions share one Deployment (docs/adapters.md): the
    scale subresource reports its pods once and selects them by their template's label, which
    is what the pods carry (a selector naming the versions would match no pod)."""
    status = InferenceRolloutStatus(stable_revision=STABLE, canary_revision=CANARY)
    world = Observation(generation=1, template_hash=CANARY, revisions={
        STABLE: RevisionState(4, 3, 3), CANARY: RevisionState(1, 1, 1)},
        templates={STABLE: "cccccccccc", CANARY: "cccccccccc"})
    assert serving_pods(status, world, ()) == 4
    assert serving_pods(status, world, (EnsureRevision(CANARY, 2),)) == 4
    assert serving_selector("chat", status, world.templates) == (
        f"{LABEL_ROLLOUT}=chat,{LABEL_REVISION} in (cccccccccc)")
