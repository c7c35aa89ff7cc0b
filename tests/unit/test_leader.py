"""The Lease algorithm's rules on a stand-in API and a stand-in clock (the real API server and
real processes: tests/integration/test_leader_election.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from inference_rollout.__main__ import main
from inference_rollout.kube import KubeError
from inference_rollout.leader import Holder, LeaseElector, Timing


class OneLease:
    """GET/POST/PUT of one Lease with resourceVersion checks, as the API server does."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = {**body, "metadata": {**body["metadata"],
                                           "resourceVersion": str(self.version)}}
        return self.lease

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        return self.lease

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.lease is not None:
            raise KubeError(409, "POST", path, "exists")
        return self._store(body)

    async def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        assert method == "PUT" and self.lease is not None
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise KubeError(409, method, path, "conflict")
        return self._store(body)

    async def close(self) -> None:
        pass

    def renewals(self) -> int:
        return self.version


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(api: OneLease, clock: Clock, identity: str) -> LeaseElector:
    return LeaseElector(api, "ops", "ir", identity, Timing(8, 5, 1), monotonic=clock)


def test_a_standby_takes_the_lease_only_after_it_went_unrenewed_for_its_duration() -> None:
    api, clock = OneLease(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert asyncio.run(a.try_acquire_or_renew())
    assert not asyncio.run(b.try_acquire_or_renew())  # b first sees the record now
    clock.t += 7.9
    assert not asyncio.run(b.try_acquire_or_renew())
    assert asyncio.run(a.try_acquire_or_renew())  # renewed: b's wait starts again
    clock.t += 7.9
    assert not asyncio.run(b.try_acquire_or_renew())
    clock.t += 8.1  # a is gone: 8 s without a change, on b's own clock
    assert asyncio.run(b.try_acquire_or_renew())
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == "b"
    assert api.lease["spec"]["leaseTransitions"] == 1
    assert not asyncio.run(a.try_acquire_or_renew())  # a returning does not take it back


def test_a_standby_waits_out_the_duration_the_leader_recorded_not_its_own() -> None:
    # client-go's rule: the term is the holder's spec.leaseDurationSeconds.  A standby started
    # with a shorter --lease-duration (3 s) must not cut the leader's 8 s term short, and one
    # with a longer flag (20 s) must not leave a dead leader's Lease untaken past its 8 s.
    api, clock = OneLease(), Clock()
    a = elector(api, clock, "a")  # lease duration 8
    short = LeaseElector(api, "ops", "ir", "short", Timing(3, 2, 1),
                         monotonic=clock)
    long = LeaseElector(api, "ops", "ir", "long", Timing(20, 5, 1),
                        monotonic=clock)
    assert asyncio.run(a.try_acquire_or_renew())
    assert api.lease is not None and api.lease["spec"]["leaseDurationSeconds"] == 8
    assert not asyncio.run(short.try_acquire_or_renew())
    assert not asyncio.run(long.try_acquire_or_renew())
    clock.t += 5  # past the short standby's own 3 s, within the leader's recorded 8 s
    assert not asyncio.run(short.try_acquire_or_renew())
    assert api.lease["spec"]["holderIdentity"] == "a"
    clock.t += 3.1  # 8.1 s without a renewal: the leader's term is over
    assert asyncio.run(long.try_acquire_or_renew())
    assert api.lease["spec"]["holderIdentity"] == "long"
    assert api.lease["spec"]["leaseDurationSeconds"] == 20  # the new holder's own term
    clock.t += 8.1  # "short" first sees the new record now: its 20 s count from here
    assert not asyncio.run(short.try_acquire_or_renew())
    clock.t += 19.9
    assert not asyncio.run(short.try_acquire_or_renew())
    clock.t += 0.2
    assert asyncio.run(short.try_acquire_or_renew())


def test_a_record_without_a_duration_falls_back_to_the_candidates_own() -> None:
    api, clock = OneLease(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert asyncio.run(a.try_acquire_or_renew())
    assert api.lease is not None
    spec = {k: v for k, v in api.lease["spec"].items() if k != "leaseDurationSeconds"}
    api._store({**api.lease, "spec": spec})
    assert not asyncio.run(b.try_acquire_or_renew())
    clock.t += 7.9
    assert not asyncio.run(b.try_acquire_or_renew())
    clock.t += 0.2
    assert asyncio.run(b.try_acquire_or_renew())


def test_a_released_lease_is_taken_at_once() -> None:
    api, clock = OneLease(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert asyncio.run(a.try_acquire_or_renew())
    assert not asyncio.run(b.try_acquire_or_renew())
    asyncio.run(a.release())
    assert asyncio.run(b.try_acquire_or_renew())


def test_timings_that_would_allow_two_leaders_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert Timing().problems() == []
    assert Timing(5, 5, 1).problems() and Timing(8, 5, 5).problems()
    with pytest.raises(SystemExit):
        main(["operator", "-A", "--leader-elect", "--lease-duration", "4",
              "--renew-deadline", "5"])
    assert "renew deadline must be shorter than the lease duration" in capsys.readouterr().err


def holding(api: OneLease, lost: threading.Event) -> Holder:
    """A leader (real clock, renewing every 0.1 s) whose Holder thread renews on ``api``.  Its
    renew deadline (8 s) is far beyond the test's 3 s of work: whether renewals go on during that
    work is what the renewal count proves, and a loaded machine that delays one renewal past a
    tight deadline must not make the test fail (it did once at 2 s, under coverage beside a
    running sandbox)."""
    e = LeaseElector(api, "ops", "ir", "a", Timing(10, 8, 0.1))
    assert asyncio.run(e.try_acquire_or_renew())
    e.last_renewed = time.monotonic()
    holder = Holder(e, lambda: api, on_lost=lost.set)
    holder.start()
    return holder


def test_the_lease_is_renewed_while_the_operators_own_work_holds_the_main_thread() -> None:
    # The chaos run's failure: a burst of reconciles kept the operator's loop busy past the
    # renew deadline and the leader exited.  Here the main thread computes for 3 s and the
    # thread keeps renewing: about one renewal per 0.1 s period, where a renewal that waited on
    # the main thread would make none until the work ends.
    api, lost = OneLease(), threading.Event()
    holder = holding(api, lost)
    before, until = api.renewals(), time.monotonic() + 3
    while time.monotonic() < until:
        sum(i * i for i in range(10_000))  # pure-Python work, holding the GIL between switches
    assert not lost.is_set()
    assert api.renewals() - before >= 5  # about one per 0.1 s period, even when slowed
    holder.stop_and_release()
    assert not holder.is_alive()
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] is None  # released
    assert not lost.is_set()


def test_the_holder_reports_a_lease_taken_by_another_replica() -> None:
    api, lost = OneLease(), threading.Event()
    holder = holding(api, lost)
    assert api.lease is not None
    api._store({**api.lease, "spec": {**api.lease["spec"], "holderIdentity": "b"}})
    assert lost.wait(3)
    holder.join(3)
    assert not holder.is_alive()
