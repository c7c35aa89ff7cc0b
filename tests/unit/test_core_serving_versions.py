"""core/serving_versions.py: what ``decide`` observes of a rollout with adapters, from its
Deployments (by template), its serving versions' Services and the pods admitted to each set."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from inference_rollout.core.adapter_plan import PodAdapters
from inference_rollout.core.serving_versions import (
    PodTargets,
    admitted_counts,
    in_place,
    observe,
    pod_targets,
)
from inference_rollout.core.serving_versions import ServingVersionFacts as Facts
from inference_rollout.core.types import RevisionState

T1, T2 = "t1t1t1t1t1", "t2t2t2t2t2"  # template hashes
A, B = "aaaaaaaaaa", "bbbbbbbbbb"  # adapter sets
S1, S2, C = "s1s1s1s1s1", "s2s2s2s2s2", "cccccccccc"  # serving versions


def moved_in_place(seen: object, stable: str) -> set[str]:
    templates = seen.templates  # type: ignore[attr-defined]
    return {sv for sv in templates if in_place(templates, stable, sv)}


FLEET = RevisionState(desired=4, ready=4, available=4, port=8000, args=("--enable-lora",))


def test_at_rest_the_stable_owns_its_deployment_and_its_ready_pods_are_the_admitted_ones() -> None:
    seen = observe({T1: FLEET}, {S1: Facts(T1, A, 4)}, {(T1, A): 3}, stable=S1, canary=None)
    # One pod Ready for Kubernetes but not admitted yet (pending: its adapters not loaded).
    assert seen.revisions == {S1: RevisionState(4, 3, 3, port=8000, args=("--enable-lora",))}
    assert moved_in_place(seen, S1) == set()


def test_an_adapter_release_is_in_place_with_the_pods_it_was_asked_for() -> None:
    seen = observe({T1: FLEET}, {S1: Facts(T1, A, 4), S2: Facts(T1, B, 2)},
                   {(T1, A): 1, (T1, B): 2}, stable=S1, canary=S2)  # one pod moving
    assert moved_in_place(seen, S1) == {S2}
    assert seen.revisions[S1].desired == 4 and seen.revisions[S1].ready == 1  # the fleet
    assert (seen.revisions[S2].desired, seen.revisions[S2].ready) == (2, 2)
    assert seen.revisions[S2].port == 8000  # the shared template's serving port


def test_the_specs_new_version_before_its_service_is_in_place_and_not_yet_a_revision() -> None:
    """``decide`` then asks for it (EnsureRevision) sized as an in-place canary."""
    seen = observe({T1: FLEET}, {S1: Facts(T1, A, 4), S2: Facts(T1, B, service=False)},
                   {(T1, A): 4}, stable=S1, canary=None)
    assert S2 not in seen.revisions and moved_in_place(seen, S1) == {S2}


def test_a_template_release_with_adapters_owns_its_new_deployment() -> None:
    new = RevisionState(desired=1, ready=1, available=1, port=8000)
    seen = observe({T1: FLEET, T2: new}, {S1: Facts(T1, A, 4), C: Facts(T2, A, 1)},
                   {(T1, A): 4}, stable=S1, canary=C)
    # Ready for Kubernetes, not yet admitted: the weight waits for its adapters.
    assert (seen.revisions[C].desired, seen.revisions[C].ready) == (1, 0)
    assert moved_in_place(seen, S1) == set()  # its own pods: sized as a template release


def test_after_promotion_the_old_stable_is_in_place_and_holds_no_pod_of_its_own() -> None:
    seen = observe({T1: FLEET}, {S1: Facts(T1, A, 4), S2: Facts(T1, B, 4)},
                   {(T1, A): 1, (T1, B): 3}, stable=S2, canary=None)
    assert seen.revisions[S2] == RevisionState(4, 3, 3, port=8000, args=("--enable-lora",))
    assert moved_in_place(seen, S2) == {S1} and seen.revisions[S1].ready == 1


def test_an_abandoned_canary_of_another_template_is_an_old_revision_not_in_place() -> None:
    stale = RevisionState(desired=1, ready=1, available=1)
    seen = observe({T1: FLEET, T2: stale}, {S1: Facts(T1, A, 4), C: Facts(T2, B, 1)},
                   {(T1, A): 4, (T2, B): 1}, stable=S1, canary=None)
    assert C in seen.revisions and C not in moved_in_place(seen, S1)
    assert (seen.revisions[C].desired, seen.revisions[C].ready) == (1, 1)


def test_a_version_whose_service_remains_is_a_revision_at_0_so_decide_deletes_it() -> None:
    """Rolled back and scaled to 0 (its pods back on the stable set), or its template's
    Deployment gone: while its Service remains, decide must see it to delete it."""
    seen = observe({T1: FLEET}, {S1: Facts(T1, A, 4), S2: Facts(T1, B, 0), C: Facts(T2, B, 0)},
                   {(T1, A): 4}, stable=S1, canary=None)
    assert seen.revisions[S2].desired == seen.revisions[C].desired == 0
    assert moved_in_place(seen, S1) == {S2}


def test_in_place_is_a_non_stable_version_of_the_stables_template() -> None:
    templates = {S1: T1, S2: T1, C: T2}
    assert in_place(templates, S1, S2) and in_place(templates, S2, S1)
    assert not in_place(templates, S1, S1) and not in_place(templates, S1, C)
    assert not in_place({}, S1, S2)  # a rollout without adapters
    assert not in_place(templates, None, S2) and not in_place(templates, S1, None)


# --- what the planner is to move each Deployment's pods to ---------------------------------------


VA, VB = {"support": "s3://a/v1"}, {"support": "s3://a/v2"}


def known(template: str, adapter_set: str, adapters: dict[str, str], pods: int = 0) -> Facts:
    return Facts(template, adapter_set, pods, adapters=adapters)


def test_an_adapter_release_moves_the_asked_count_of_the_stables_pods() -> None:
    versions = {S1: known(T1, A, VA, 4), S2: known(T1, B, VB, 1)}
    targets = pod_targets(versions, S1, S2, asked={S2: 2})  # this reconcile asked for 2
    assert targets == {T1: PodTargets(A, B, 2, {A: VA, B: VB})}
    recorded = pod_targets(versions, S1, S2, asked={})[T1]
    assert isinstance(recorded, PodTargets) and recorded.canary_pods == 1  # as recorded


def test_at_rest_and_after_a_rollback_every_pod_is_on_the_stable_set() -> None:
    versions = {S1: known(T1, A, VA, 4), S2: known(T1, B, VB, 0)}
    assert pod_targets(versions, S1, None, {}) == {T1: PodTargets(A, None, 0, {A: VA, B: VB})}


def test_a_promotion_moves_every_pod_to_the_new_stable_set() -> None:
    versions = {S1: known(T1, A, VA, 4), S2: known(T1, B, VB, 3)}
    assert pod_targets(versions, S2, None, {})[T1] == PodTargets(B, None, 0, {A: VA, B: VB})


def test_a_template_release_loads_its_own_set_on_its_own_pods() -> None:
    versions = {S1: known(T1, A, VA, 4), C: known(T2, B, VB, 1)}
    targets = pod_targets(versions, S1, C, {})
    assert targets[T1] == PodTargets(A, None, 0, {A: VA, B: VB})  # the stable's untouched
    assert targets[T2] == PodTargets(B, None, 0, {A: VA, B: VB})  # all of C's pods on its set


def test_a_set_whose_adapters_are_unknown_is_never_a_target() -> None:
    versions = {S1: known(T1, A, VA, 4), S2: Facts(T1, B, 1, adapters=None)}
    reason = pod_targets(versions, S1, S2, {})[T1]
    assert isinstance(reason, str) and B in reason


def test_only_pods_admitted_and_serving_exactly_their_set_count_as_ready() -> None:
    t0 = datetime(2026, 12, 7, tzinfo=UTC)

    def pod(name: str, label: str | None, loaded: dict[str, str] | None,
            started: datetime = t0) -> PodAdapters:
        return PodAdapters(name, serving=loaded is not None, loaded=loaded, label=label,
                           admitted=label is not None, moved_at=t0,
                           container_started_at=started, verified_start=t0)

    sets = {A: VA, B: VB}
    pods = {T1: [pod("ok-a", A, {**VA, "unmanaged": "x"}),  # others' adapters do not matter
                 pod("ok-b", B, VB),
                 pod("moving", None, VB),
                 pod("stale", A, {}, started=t0 + timedelta(minutes=1)),  # restarted
                 pod("wrong", A, VB),  # its label says A, it serves B
                 pod("unread", A, None)],
            T2: [pod("new-b", B, VB)]}
    assert admitted_counts(pods, sets) == {(T1, A): 1, (T1, B): 1, (T2, B): 1}
