"""Leader election on a ``coordination.k8s.io/v1`` Lease: with two operator replicas, exactly one
reconciles, and the other takes over within seconds when it dies.

Why not kopf's peering: peering pauses an operator while one of *higher priority* runs, and
replicas of the same priority all freeze with a warning; it elects no leader.  Why not reconcile
in every replica and lean on the fenced status writes: route and Deployment writes are not fenced,
and two replicas would move traffic on their own schedules.  So the process campaigns first and
starts kopf (watches, finalizers, daemons) only once it holds the Lease: a standby writes nothing.

The algorithm is client-go's ``leaderelection``: a candidate takes the Lease when its holder has
not renewed it for the *holder's* lease duration (the ``spec.leaseDurationSeconds`` the holder
wrote, not the candidate's own ``--lease-duration``: replicas configured differently, as during a
rolling update that changes the flag, must not cut a leader's term short) *as observed on the
candidate's own monotonic clock* (the record's timestamps are never compared across machines, so
clock skew does not matter).  The
leader renews every ``retry_period``; if no renewal succeeds for ``renew_deadline`` (shorter than
``lease_duration``), it can no longer prove it is the leader and stops at once (the process
exits, Kubernetes restarts it as a standby), before any other candidate may take over.  A leader
that stops cleanly (SIGTERM in a rolling update) releases the Lease, so the standby takes over on
its next poll instead of waiting out the duration.

Worst-case failover after a SIGKILL: ``lease_duration + 2 * retry_period`` to take the Lease
(the candidate observed the last renewal up to one period late and checks once a period), then
kopf's start and the first reconcile (docs/reliability.md has the measured figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from .kube import KubeError
from .kube_protocol import LeaseClient
from .paths import ns_path

log = logging.getLogger("inference_rollout.leader")


@dataclass(frozen=True)
class Timing:
    """Seconds.  Defaults give a failover under 15 s (docs/reliability.md)."""

    lease_duration: float = 8.0
    renew_deadline: float = 5.0
    retry_period: float = 1.0

    def problems(self) -> list[str]:
        out = []
        if not 0 < self.retry_period < self.renew_deadline:
            out.append("the retry period must be positive and shorter than the renew deadline")
        if not self.renew_deadline < self.lease_duration:
            out.append("the renew deadline must be shorter than the lease duration (a leader "
                       "must know it lost the Lease before another replica may take it)")
        return out


def default_identity() -> str:
    """The pod's name (the hostname in a pod) and a random suffix: a restarted container is a
    new candidate, never mistaken for the holder it replaced."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(self, kube: LeaseClient, namespace: str, name: str, identity: str,
                 timing: Timing = Timing(),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.identity, self.timing, self.monotonic = identity, timing, monotonic
        self.path = ns_path("coordination.k8s.io", "v1", namespace, "leases", name)
        self._observed: tuple[Any, ...] | None = None  # the holder's record as last seen
        self._observed_at = 0.0
        self.last_renewed = 0.0

    def _record(self, lease: dict[str, Any]) -> tuple[Any, ...]:
        spec = lease.get("spec") or {}
        return (spec.get("holderIdentity"), spec.get("renewTime"),
                spec.get("leaseTransitions"), spec.get("leaseDurationSeconds"),
                lease["metadata"].get("resourceVersion"))

    def _recorded_duration(self, spec: dict[str, Any]) -> float:
        """How long the holder's term lasts, as the holder wrote it (client-go reads it from
        the record too); this replica's own duration only when the record has none."""
        try:
            seconds = float(spec["leaseDurationSeconds"])
        except (KeyError, TypeError, ValueError):
            return self.timing.lease_duration
        return seconds if seconds > 0 else self.timing.lease_duration

    def _spec(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        now = _now_micro()
        spec = dict(previous or {})
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if previous else 0)
        spec.update(holderIdentity=self.identity, renewTime=now,
                    leaseDurationSeconds=max(1, round(self.timing.lease_duration)))
        return spec

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        lease = await self.kube.get_or_none(self.path)
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(None)}
            try:
                await self.kube.create(ns_path("coordination.k8s.io", "v1", self.namespace,
                                               "leases"), body)
            except KubeError as e:
                if e.status == 409:  # another candidate created it first
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        record = self._record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, self.monotonic()
        if holder and holder != self.identity and \
                self.monotonic() < self._observed_at + self._recorded_duration(spec):
            return False  # held, and renewed within the holder's lease duration as we saw it
        try:
            await self.kube.request("PUT", self.path, {
                **lease, "spec": self._spec(spec)})
        except KubeError as e:
            if e.status == 409:  # renewed or taken meanwhile
                return False
            raise
        return True

    async def acquire(self) -> None:
        """Campaign until this replica holds the Lease."""
        waiting_logged = False
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self.last_renewed = self.monotonic()
                    log.info("leader: %s holds Lease %s/%s", self.identity, self.namespace,
                             self.name)
                    return
                if not waiting_logged:
                    log.info("standby: Lease %s/%s is held by %s; waiting", self.namespace,
                             self.name, self._observed[0] if self._observed else "?")
                    waiting_logged = True
            except KubeError as e:
                log.warning("leader election: %s", e)
            await asyncio.sleep(self.timing.retry_period * (1 + 0.2 * random.random()))

    async def hold(self) -> None:
        """Renew every retry period; return when leadership is lost (no successful renewal for
        the renew deadline, or another holder in the Lease)."""
        while True:
            await asyncio.sleep(self.timing.retry_period)
            if self.monotonic() - self.last_renewed >= self.timing.renew_deadline:
                # The loop itself was late (a stalled process): no attempt can make up for it.
                log.error("leader: Lease %s/%s not renewed for %.1fs", self.namespace, self.name,
                          self.monotonic() - self.last_renewed)
                return
            try:
                renewed = await asyncio.wait_for(
                    self.try_acquire_or_renew(),
                    timeout=self.last_renewed + self.timing.renew_deadline - self.monotonic())
            except (KubeError, TimeoutError) as e:
                log.warning("leader: renewing Lease %s/%s: %s", self.namespace, self.name,
                            e or "timed out")
                renewed = False
            if renewed:
                self.last_renewed = self.monotonic()
            elif self.monotonic() - self.last_renewed >= self.timing.renew_deadline or (
                    self._observed and self._observed[0] not in (None, "", self.identity)):
                log.error("leader: lost Lease %s/%s (last renewed %.1fs ago)", self.namespace,
                          self.name, self.monotonic() - self.last_renewed)
                return

    async def release(self) -> None:
        """Give the Lease up (a clean stop): the standby takes over on its next poll."""
        try:
            lease = await self.kube.get_or_none(self.path)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                spec = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
                await self.kube.request("PUT", self.path, {**lease, "spec": spec})
                log.info("leader: released Lease %s/%s", self.namespace, self.name)
        except KubeError as e:
            log.warning("leader: releasing Lease %s/%s: %s", self.namespace, self.name, e)


class Holder(threading.Thread):
    """Renews the Lease from a thread of its own, on its own event loop and HTTP client.

    Why a thread: on the operator's loop, a renewal waits behind whatever the reconciles are
    doing (kopf's watch events, status parsing, decisions).  In the sandbox chaos run, 20
    rollouts starting at once on a loaded 2-core machine held that loop long enough for both
    replicas' renewals to miss the renew deadline: each exited as it must, and no replica was
    left.  This thread only waits on the network and a timer, so it runs whenever the loop's
    work releases the GIL (every few milliseconds even for pure-Python work), as client-go's
    elector runs in its own goroutine.

    ``on_lost`` is called from this thread when leadership is lost (the process exits there);
    :meth:`stop_and_release` ends renewing and gives the Lease up (a clean stop)."""

    def __init__(self, elector: LeaseElector, make_kube: Callable[[], LeaseClient],
                 on_lost: Callable[[], None]) -> None:
        super().__init__(name="lease-holder", daemon=True)
        self.elector, self.make_kube, self.on_lost = elector, make_kube, on_lost
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()

    def run(self) -> None:
        asyncio.run(self._hold())

    async def _hold(self) -> None:
        self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
        self.elector.kube = self.make_kube()  # an aiohttp session belongs to the loop it runs on
        self._ready.set()
        holding = asyncio.create_task(self.elector.hold())
        stopping = asyncio.create_task(self._stopping.wait())
        await asyncio.wait({holding, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if holding.done():
            self.on_lost()
            return
        holding.cancel()
        await self.elector.release()
        await self.elector.kube.close()

    def stop_and_release(self, timeout: float = 10.0) -> None:
        self._ready.wait(timeout)
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self.join(timeout)


def lease_namespace(explicit: str | None) -> str:
    """``--leader-election-namespace``, else the pod's namespace (downward API ``POD_NAMESPACE``
    or the ServiceAccount's namespace file), else ``default``."""
    if explicit:
        return explicit
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


@contextlib.asynccontextmanager
async def standby_health(port: int) -> AsyncIterator[None]:
    """``/healthz`` on the liveness port while this replica waits for the Lease (kopf, which
    serves it once leading, is not running yet): a standby is alive, not to be restarted."""
    app = web.Application()
    app.router.add_get("/healthz", lambda _r: _ok())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()  # a pod port: all interfaces
    try:
        yield
    finally:
        await runner.cleanup()


async def _ok() -> web.Response:
    return web.Response(text="standby")
