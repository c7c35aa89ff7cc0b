"""The adapter planner (core/adapter_plan.py): every move order it makes keeps the one promise
an adapter release needs, whatever is cut short by a crash or a container restart:

    a pod in the Services' endpoints serves exactly the adapter versions its label names
    (or, after a restart, none of them: vLLM answers 404 for the name, never another version);

and repeated plans converge on the step's pod counts.  A small world applies moves one at a
time, as the reconciler does, and the tests stop it after every prefix of a plan.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from inference_rollout.api import REVISION_PATTERN
from inference_rollout.core.adapter_plan import (
    Admit,
    Evict,
    LoadAdapter,
    PodAdapters,
    UnloadAdapter,
    plan,
    serving_version,
    set_id,
    targets,
)
from inference_rollout.core.capacity import in_place_canary_pods

T0 = datetime(2026, 12, 7, tzinfo=UTC)
DRAIN = 5.0
V1 = {"support": "s3://adapters/support/v1", "code": "s3://adapters/code/v3"}
V2 = {"support": "s3://adapters/support/v2", "code": "s3://adapters/code/v3"}
S1, S2 = set_id(V1), set_id(V2)
SETS = {S1: V1, S2: V2}


STARTED = T0 - timedelta(hours=2)


def steady(n: int, sources: dict[str, str] = V1, label: str = S1) -> dict[str, PodAdapters]:
    return {f"pod-{i}": PodAdapters(f"pod-{i}", serving=True, loaded=dict(sources), label=label,
                                    admitted=True, moved_at=T0 - timedelta(hours=1),
                                    container_started_at=STARTED, verified_start=STARTED)
            for i in range(n)}


class World:
    """Pods as the reconciler would see them; moves applied one at a time."""

    def __init__(self, pods: dict[str, PodAdapters]) -> None:
        self.pods, self.now = dict(pods), T0

    def apply(self, move: object) -> None:
        p = self.pods[move.pod]  # type: ignore[attr-defined]
        if isinstance(move, Evict):
            p = replace(p, admitted=False, moved_at=self.now)
        elif isinstance(move, LoadAdapter):
            assert not p.admitted, f"{move}: loaded into a pod in the endpoints"
            p = replace(p, loaded={**(p.loaded or {}), move.adapter: move.source})
        elif isinstance(move, UnloadAdapter):
            assert not p.admitted, f"{move}: unloaded from a pod in the endpoints"
            p = replace(p, loaded={k: v for k, v in (p.loaded or {}).items() if k != move.adapter})
        elif isinstance(move, Admit):
            p = replace(p, label=move.set_id, admitted=True, moved_at=self.now,
                        verified_start=move.verified_start)
        self.pods[p.name] = p

    def restart(self, name: str) -> None:
        """The container restarts: vLLM comes back with no runtime adapters; the label stays."""
        p = self.pods[name]
        self.pods[name] = replace(p, loaded={}, container_started_at=self.now)

    def check(self) -> None:
        for p in self.pods.values():
            if not (p.admitted and p.serving):
                continue
            assert p.label in SETS, p
            named = SETS[p.label]
            for adapter, source in (p.loaded or {}).items():
                assert named.get(adapter) == source, (
                    f"{p.name} in the endpoints as {p.label} serves {adapter}={source}")
            if not p.stale:
                assert dict(p.loaded or {}) == named, p

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pods.values():
            if p.admitted and p.serving and p.label and not p.stale and (
                    dict(p.loaded or {}) == SETS[p.label]):
                out[p.label] = out.get(p.label, 0) + 1
        return out

    def run(self, canary: str | None, weight: int, rounds: int = 60,
            cut: random.Random | None = None, stable: str = S1) -> int:
        """Plan and apply until nothing is left to do, with the canary count the decision sizes
        for ``weight``; ``cut``: apply only a random prefix of each plan (a crash), checking the
        promise after every move.  Returns the plans made."""
        count = in_place_canary_pods(len(self.pods), weight)
        for i in range(rounds):
            pl = plan(list(self.pods.values()), SETS, stable, canary, count, self.now, DRAIN)
            if not pl.moves and pl.wake_in is None:
                return i
            moves = list(pl.moves)
            if cut is not None:
                moves = moves[:cut.randint(0, len(moves))]
            for m in moves:
                self.apply(m)
                self.check()
            self.now += timedelta(seconds=pl.wake_in if pl.wake_in is not None else 1)
        raise AssertionError(f"no convergence in {rounds} plans: {self.pods}")


@pytest.mark.parametrize(("busy", "after", "most", "moves"), [
    (None, 6.0, 60.0, "load"),   # unread: the least drain is all it gets (as before the read)
    (0, 6.0, 60.0, "load"),      # nothing in flight: at once after the least drain
    (3, 6.0, 60.0, "wait"),      # a generation still running: it waits
    (3, 61.0, 60.0, "load"),     # ... at most drain_max_seconds from the eviction
    (3, 6.0, None, "load"),      # no maximum given: the least drain only
    (0, 2.0, 60.0, "wait"),      # idle, but the endpoints may still send: the least drain holds
])
def test_a_drain_lasts_the_least_time_then_while_the_pod_has_requests_in_flight(
        busy: int | None, after: float, most: float | None, moves: str) -> None:
    w = World(steady(4))
    w.apply(Evict("pod-0"))
    w.pods["pod-0"] = replace(w.pods["pod-0"], busy=busy)
    pl = plan(list(w.pods.values()), SETS, S1, S2, 2, w.now + timedelta(seconds=after), DRAIN,
              most)
    if moves == "load":
        assert pl.moves == (LoadAdapter("pod-0", "support", V2["support"]),)
    else:
        assert pl.moves == () and pl.wake_in is not None and 0 < pl.wake_in <= DRAIN


def test_a_step_moves_one_pod_at_a_time_out_drained_loaded_then_admitted() -> None:
    w = World(steady(4))
    first = plan(list(w.pods.values()), SETS, S1, S2, 2, w.now, DRAIN)
    assert first.targets == {"pod-0": S2, "pod-1": S2, "pod-2": S1, "pod-3": S1}
    assert first.moves == (Evict("pod-0"),)  # one at a time: pod-1 waits for pod-0
    w.apply(Evict("pod-0"))
    waiting = plan(list(w.pods.values()), SETS, S1, S2, 2, w.now + timedelta(seconds=2), DRAIN)
    assert waiting.moves == () and waiting.wake_in == pytest.approx(3.0)  # still draining
    w.now += timedelta(seconds=DRAIN)
    load = plan(list(w.pods.values()), SETS, S1, S2, 2, w.now, DRAIN)
    assert load.moves == (LoadAdapter("pod-0", "support", V2["support"]),)  # code is unchanged
    w.apply(load.moves[0])
    assert plan(list(w.pods.values()), SETS, S1, S2, 2, w.now, DRAIN).moves == (
        Admit("pod-0", S2, STARTED),)  # with the container start /v1/models was read on
    w.run(S2, 50)
    assert w.counts() == {S2: 2, S1: 2}


@pytest.mark.parametrize(("weight", "k"), [(5, 1), (20, 1), (50, 3), (100, 4)])
def test_each_step_converges_on_its_pod_counts_and_promotion_on_all(weight: int, k: int) -> None:
    w = World(steady(5))
    w.run(S2, weight)
    assert w.counts() == {S2: k, S1: 5 - k}  # the stable set keeps a pod, also at 100 %
    w.run(None, 0, stable=S2)  # promoted: the new set is the stable one
    assert w.counts() == {S2: 5}


def test_rollback_returns_every_pod_to_the_stable_set_and_unloads_what_it_added() -> None:
    extra = {**V2, "summarise": "s3://adapters/summarise/v1"}
    sets = {S1: V1, set_id(extra): extra}
    w = World(steady(3))
    for _ in range(40):  # to 50 % of the pods on a set that adds an adapter
        pl = plan(list(w.pods.values()), sets, S1, set_id(extra), 2, w.now, DRAIN)
        for m in pl.moves:
            w.apply(m)
        w.now += timedelta(seconds=DRAIN)
    assert sum(1 for p in w.pods.values() if p.label == set_id(extra) and p.admitted) == 2
    for _ in range(40):  # rolled back: canary None
        pl = plan(list(w.pods.values()), sets, S1, None, 0, w.now, DRAIN)
        for m in pl.moves:
            w.apply(m)
        w.now += timedelta(seconds=DRAIN)
    assert all(p.admitted and p.label == S1 and p.loaded == V1 for p in w.pods.values())


def test_a_plan_cut_short_anywhere_never_admits_a_pod_that_serves_another_version() -> None:
    rng = random.Random(7)
    for _trial in range(300):
        n = rng.randint(1, 6)
        w = World(steady(n))
        for weight in (5, 20, 50, 100):
            w.run(S2, weight, rounds=200, cut=rng)
        assert w.counts() == {k: v for k, v in {S2: n - 1, S1: 1}.items() if v}
        w.run(None, 0, rounds=200, cut=rng)  # and back, as a rollback does
        assert w.counts() == {S1: n}
        for weight in (5, 100):
            w.run(S2, weight, rounds=200, cut=rng)
        w.run(None, 0, rounds=200, cut=rng, stable=S2)  # or on, as a promotion does
        assert w.counts() == {S2: n}


def test_a_restarted_container_is_taken_out_and_loaded_again() -> None:
    w = World(steady(3))
    w.run(S2, 50)
    canary = next(p.name for p in w.pods.values() if p.label == S2)
    w.now += timedelta(seconds=30)
    w.restart(canary)
    w.check()  # in the endpoints with no adapter: 404 for the name, never another version
    pl = plan(list(w.pods.values()), SETS, S1, S2, 2, w.now, DRAIN)
    assert Evict(canary) in pl.moves
    w.run(S2, 50)
    assert w.counts() == {S2: 2, S1: 1}


def test_a_restart_between_the_read_and_the_admit_leaves_the_label_stale() -> None:
    """The pod's /v1/models was read, then its container restarted, then Admit was written:
    the label records the start it was read on, so the next plan sees it stale and takes the
    pod out, where a label stamped with the time of writing would have looked fresh."""
    w = World(steady(3))
    w.now += timedelta(seconds=1)
    pl = plan(list(w.pods.values()), SETS, S1, S2, 2, w.now, DRAIN)
    while not any(isinstance(m, Admit) for m in pl.moves):
        for m in pl.moves:
            w.apply(m)
        w.now += timedelta(seconds=pl.wake_in or 1)
        pl = plan(list(w.pods.values()), SETS, S1, S2, 2, w.now, DRAIN)
    admit = next(m for m in pl.moves if isinstance(m, Admit))
    w.restart(admit.pod)  # after the read, before the write
    w.now += timedelta(seconds=1)
    w.apply(admit)
    assert w.pods[admit.pod].stale
    assert Evict(admit.pod) in plan(list(w.pods.values()), SETS, S1, S2, 2, w.now, DRAIN).moves
    w.run(S2, 50)
    assert w.counts() == {S2: 2, S1: 1}


def test_restarts_at_random_moments_keep_the_promise() -> None:
    rng = random.Random(11)
    for _trial in range(200):
        w = World(steady(4))
        for weight in (20, 50, 100):
            for _ in range(rng.randint(0, 3)):
                w.restart(rng.choice(sorted(w.pods)))
                w.check()
                w.now += timedelta(seconds=1)
            w.run(S2, weight, rounds=200, cut=rng)
        assert w.counts() == {S2: 3, S1: 1}
        w.run(None, 0, rounds=200, cut=rng, stable=S2)
        assert w.counts() == {S2: 4}


def test_pods_already_on_the_canary_stay_there_as_the_weight_grows() -> None:
    w = World(steady(6))
    w.run(S2, 20)
    first = {n for n, p in w.pods.items() if p.label == S2}
    w.run(S2, 50)
    now = {n for n, p in w.pods.items() if p.label == S2}
    assert first < now  # grew; none moved back


def test_a_pod_that_cannot_be_read_is_left_alone() -> None:
    pods = steady(2)
    pods["pod-1"] = replace(pods["pod-1"], loaded=None)
    pl = plan(list(pods.values()), SETS, S1, S2, 1, T0, DRAIN)
    assert all(m.pod != "pod-1" for m in pl.moves)


def test_targets_without_a_canary_are_all_stable() -> None:
    assert set(targets(list(steady(3).values()), SETS, S1, None, 50).values()) == {S1}
    assert set_id(V1) == set_id(dict(reversed(list(V1.items()))))  # order-free
    assert set_id(V1) != set_id(V2)


def test_a_serving_version_is_the_template_hash_without_adapters_and_distinct_with_them() -> None:
    template = "0123456789"
    assert serving_version(template, {}) == template  # a rollout without adapters: no new name
    ours = {serving_version(template, V1), serving_version(template, V2),
            serving_version("abcdef0123", V1)}
    assert len(ours) == 3 and template not in ours
    for version in ours:
        assert re.fullmatch(REVISION_PATTERN, version)
    # the set, not the order it was written in
    assert serving_version(template, dict(reversed(V1.items()))) == serving_version(template, V1)
