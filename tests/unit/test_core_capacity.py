"""Table tests of the capacity arithmetic: pods per weight, servable share, surge and swap."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.coresim import manifest_spec

from inference_rollout.api.spec import InferenceRolloutSpec, Step
from inference_rollout.core import capacity as cap


def spec(replicas: int = 4, mode: str = "surge", max_surge: int = 1) -> InferenceRolloutSpec:
    return InferenceRolloutSpec.parse(manifest_spec(
        replicas=replicas, capacity={"mode": mode, "maxSurge": max_surge}))


@pytest.mark.parametrize(
    ("replicas", "weight", "pods"),
    [
        (4, 5, 1), (4, 20, 1), (4, 25, 1), (4, 26, 2), (4, 50, 2), (4, 51, 3), (4, 100, 4),
        (1, 1, 1), (1, 100, 1), (3, 33, 1), (3, 34, 2), (8, 13, 2), (8, 12, 1), (7, 100, 7),
    ],
)
def test_pods_for_weight(replicas: int, weight: int, pods: int) -> None:
    assert cap.pods_for_weight(replicas, weight) == pods


@pytest.mark.parametrize(
    ("replicas", "ready", "share"),
    [(4, 0, 0), (4, 1, 25), (4, 2, 50), (4, 3, 75), (4, 4, 100), (4, 6, 100), (3, 1, 33),
     (3, 2, 66), (1, 1, 100), (8, 1, 12)],
)
def test_servable_share(replicas: int, ready: int, share: int) -> None:
    assert cap.servable_share(spec(replicas), Step(weight=5), ready) == share


@pytest.mark.parametrize("replicas", range(1, 9))
def test_ready_enough_is_exactly_a_servable_share(replicas: int) -> None:
    """The pod count a weight asks for is the least that can serve it: never route to what cannot
    serve, and never wait for more pods than the share needs."""
    s = spec(replicas)
    for weight in range(1, 101):
        step = Step(weight=weight)
        need = cap.canary_target(s, step)
        assert cap.ready_enough(s, step, need)
        assert cap.servable_share(s, step, need) >= weight
        assert not cap.ready_enough(s, step, need - 1)
        assert cap.servable_share(s, step, need - 1) < weight


@pytest.mark.parametrize(
    ("step", "ready", "target", "enough", "share"),
    [
        # overdrive: the user chose the pod count apart from the weight
        ({"weight": 50, "replicas": 1}, 0, 1, False, 0),
        ({"weight": 50, "replicas": 1}, 1, 1, True, 100),
        ({"weight": 5, "replicas": 3}, 2, 3, False, 0),
        ({"weight": 5, "replicas": 3}, 3, 3, True, 100),
        # no override: the weight decides
        ({"weight": 50}, 1, 2, False, 25),
        ({"weight": 50}, 2, 2, True, 50),
    ],
)
def test_overdrive_step_replicas(step: dict[str, Any], ready: int, target: int, enough: bool,
                                 share: int) -> None:
    s, st = spec(4), Step.model_validate(step)
    assert cap.canary_target(s, st) == target
    assert cap.ready_enough(s, st, ready) is enough
    assert cap.servable_share(s, st, ready) == share


@pytest.mark.parametrize(
    ("replicas", "weight", "ready", "stable_now", "stable", "canary"),
    [
        (4, 5, 0, 4, 4, 1),
        (4, 50, 1, 4, 4, 2),
        (4, 100, 4, 4, 4, 4),
        (1, 100, 0, 1, 1, 1),
    ],
)
def test_surge_keeps_stable_and_adds_canary(replicas: int, weight: int, ready: int,
                                            stable_now: int, stable: int, canary: int) -> None:
    got = cap.release_pod_counts(spec(replicas, "surge"), Step(weight=weight), ready, stable_now)
    assert got == cap.PodCounts(stable=stable, canary=canary)


@pytest.mark.parametrize(
    ("max_surge", "weight", "ready", "stable_now", "stable", "canary"),
    [
        # step 1 (5%, one pod): the canary starts in the surge slot, stable keeps all its pods
        (1, 5, 0, 4, 4, 1),
        # the canary pod is Ready: stable gives one pod back
        (1, 5, 1, 4, 3, 1),
        (1, 5, 1, 3, 3, 1),
        # step 3 (50%, two pods): the canary grows into the room stable already gave back
        (1, 50, 1, 3, 3, 2),
        (1, 50, 2, 3, 2, 2),
        (1, 50, 2, 2, 2, 2),
        # step 4 (100%): stable shrinks as canary pods become Ready, the canary takes the room
        (1, 100, 2, 2, 2, 3),
        (1, 100, 3, 2, 1, 4),
        (1, 100, 3, 1, 1, 4),
        # ... but keeps its last pod until promotion: a rollback's warm pod (the quota kept it)
        (1, 100, 4, 1, 1, 4),
        # a larger surge lets more canary pods start before stable shrinks
        (2, 50, 0, 4, 4, 2),
        (2, 100, 0, 4, 4, 2),
        (2, 100, 2, 4, 2, 4),
        (2, 100, 1, 4, 3, 3),
        # the stable's shrink is written before the canary's growth, in the same decision
        (1, 50, 1, 4, 3, 2),
    ],
)
def test_swap_stays_within_quota(max_surge: int, weight: int, ready: int, stable_now: int,
                                 stable: int, canary: int) -> None:
    s = spec(4, "swap", max_surge)
    got = cap.release_pod_counts(s, Step(weight=weight), ready, stable_now)
    assert got == cap.PodCounts(stable=stable, canary=canary)
    assert stable + canary <= 4 + max_surge


@pytest.mark.parametrize("replicas", range(1, 9))
@pytest.mark.parametrize("max_surge", [1, 2])
def test_swap_exhaustive_quota_and_no_lost_capacity(replicas: int, max_surge: int) -> None:
    """From every fleet within quota (ready canary pods ≤ its desired pods), the next counts are
    within quota, also between the two writes when the shrinking one goes first; stable gives
    back only what Ready canary pods replace; Ready canary pods are never taken away."""
    s = spec(replicas, "swap", max_surge)
    quota = replicas + max_surge
    for weight in (1, 5, 20, 33, 50, 99, 100):
        step = Step(weight=weight)
        target = cap.canary_target(s, step)
        for canary_now in range(0, target + 1):
            for ready in range(0, canary_now + 1):
                for stable_now in range(0, min(replicas, quota - canary_now) + 1):
                    got = cap.release_pod_counts(s, step, ready, stable_now)
                    assert got.stable + got.canary <= quota
                    # applied shrink-first (as decide orders them), every write stays in quota
                    if got.stable > stable_now:
                        assert stable_now + got.canary <= quota
                    else:
                        assert got.stable + canary_now <= quota
                    assert got.stable >= replicas - ready
                    assert ready <= got.canary <= target


@pytest.mark.parametrize(
    ("mode", "wanted", "stable_now", "others", "stable"),
    [
        ("surge", 4, 2, 3, 4),  # surge: extra GPUs are the point
        ("swap", 4, 2, 2, 3),  # an abandoned canary holds 2 of 5 GPUs: grow to 3 for now
        ("swap", 4, 2, 0, 4),
        ("swap", 4, 2, 4, 2),  # no room: stay, never shrink for it
        ("swap", 2, 4, 3, 2),  # shrinking is always allowed
        ("swap", 4, 4, 3, 4),
    ],
)
def test_stable_within_quota(mode: str, wanted: int, stable_now: int, others: int,
                             stable: int) -> None:
    assert cap.stable_within_quota(spec(4, mode, 1), wanted, stable_now, others) == stable


@pytest.mark.parametrize(
    ("weight", "ready", "stable_now", "others", "stable", "canary"),
    [
        (50, 0, 2, 2, 3, 0),  # the old canary's 2 pods leave no room for the new one yet
        (50, 0, 3, 2, 3, 0),
        (50, 0, 3, 0, 4, 1),  # gone: stable regrows, the new canary starts in the surge slot
        (5, 1, 4, 1, 3, 1),
    ],
)
def test_swap_counts_other_revisions_against_the_quota(
        weight: int, ready: int, stable_now: int, others: int, stable: int, canary: int) -> None:
    got = cap.release_pod_counts(spec(4, "swap", 1), Step(weight=weight), ready, stable_now, others)
    assert got == cap.PodCounts(stable=stable, canary=canary)
    assert got.stable + got.canary + others <= 5


@pytest.mark.parametrize(
    ("replicas", "max_surge", "step_replicas", "target"),
    [(1, 1, 2, 1), (2, 1, 4, 2), (4, 2, 4, 4), (4, 1, 6, 4), (3, 1, None, 3)],
)
def test_a_swap_canary_fits_the_quota_beside_the_stables_last_pod(
        replicas: int, max_surge: int, step_replicas: int | None, target: int) -> None:
    """An overdrive count written for a larger fleet, after an autoscaler scaled it down: the
    stable keeps one pod while it serves, so the canary gets what is left of the quota (found
    by the scaling property test: a release waited for 2 canary pods in a quota of 2)."""
    s = spec(replicas=replicas, mode="swap", max_surge=max_surge)
    step = Step(weight=100, replicas=step_replicas)
    assert cap.canary_target(s, step) == target
    counts = cap.release_pod_counts(s, step, canary_ready=0, stable_desired_now=replicas)
    assert counts.stable + counts.canary <= replicas + max_surge
    ready = cap.release_pod_counts(s, step, canary_ready=target, stable_desired_now=1)
    assert cap.ready_enough(s, step, ready.canary)


# --- in place: an adapter release moves the fleet's own pods (docs/adapters.md) -----------------


@pytest.mark.parametrize(("replicas", "weight", "pods"), [
    (4, 0, 0), (4, 5, 1), (4, 20, 1), (4, 50, 2), (4, 99, 3), (4, 100, 3), (1, 50, 0),
    (1, 100, 0), (2, 100, 1), (10, 5, 1), (10, 20, 2), (10, 55, 6), (0, 50, 0)])
def test_in_place_canary_pods_are_the_weights_share_and_the_stable_keeps_one(
        replicas: int, weight: int, pods: int) -> None:
    assert cap.in_place_canary_pods(replicas, weight) == pods


@pytest.mark.parametrize("replicas", range(2, 12))
def test_in_place_is_a_template_releases_count_kept_one_pod_short_of_the_fleet(
        replicas: int) -> None:
    """The same pods a template release's canary would get, out of the same fleet: at most all
    but one, also at 100 % (a rollback's write must find a pod of the stable set)."""
    for weight in range(1, 101):
        assert cap.in_place_canary_pods(replicas, weight) == min(
            cap.pods_for_weight(replicas, weight), replicas - 1)


@pytest.mark.parametrize("mode", ["surge", "swap"])
@pytest.mark.parametrize("replicas", [2, 3, 4, 7])
def test_in_place_counts_add_no_pod_and_ready_enough_is_the_moved_count(
        mode: str, replicas: int) -> None:
    s = spec(replicas, mode)
    for weight in range(1, 101):
        step = Step(weight=weight)
        need = cap.in_place_canary_pods(replicas, weight)
        assert cap.canary_target(s, step, in_place=True) == need
        # The stable's Deployment keeps the fleet; nothing is added, in either mode.
        assert cap.release_pod_counts(s, step, need, replicas, in_place=True) == cap.PodCounts(
            stable=replicas, canary=need)
        assert cap.ready_enough(s, step, need, in_place=True)
        assert cap.carried_weight(s, step, need, weight, in_place=True) == weight
        assert not cap.ready_enough(s, step, need - 1, in_place=True)
        assert cap.carried_weight(s, step, need - 1, weight, in_place=True) < weight


def test_in_place_ignores_overdrive_there_is_no_pod_to_add() -> None:
    s = spec(4)
    step = Step(weight=5, replicas=3)
    assert cap.canary_target(s, step) == 3
    assert cap.canary_target(s, step, in_place=True) == 1
    assert cap.carried_weight(s, step, 1, 5, in_place=True) == 5
