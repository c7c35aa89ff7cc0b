"""The kopf wiring around the reconciler (handlers.py), driven without kopf's machinery: one
reconcile from a fresh read and its backoffs, the one Warning Event per distinct problem, the
fail-safe after a bug, the delete handler's retries, the daemon's wake-ups, and the settings and
credentials handed to kopf.  The API is the in-memory one of tests/unit/memory_kube.py."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any, cast

import kopf
import pytest
from kubernetes.aio.client import Configuration
from tests.unit.coresim import manifest_spec
from tests.unit.memory_kube import MemoryKube

from inference_rollout import handlers, operator_metrics
from inference_rollout.core.types import RecordEvent
from inference_rollout.handlers import (
    ERROR_BACKOFF_SECONDS,
    FINALIZER,
    Runtime,
    _QuietWakeups,
    _reconcile_once,
    on_delete,
    run_rollout,
    wake_on_change,
)
from inference_rollout.kube import KubeError
from inference_rollout.paths import ns_path, rollout_path
from inference_rollout.reconciler import DeletionHeld, Deps

NS, NAME = "prod", "chat"
ROLLOUT = rollout_path(NS, NAME)
ROUTE = ns_path("gateway.networking.k8s.io", "v1", NS, "httproutes", NAME)
DEPLOYMENTS = ns_path("apps", "v1", NS, "deployments")


class Posted:
    def __init__(self) -> None:
        self.events: list[tuple[str, RecordEvent]] = []

    async def __call__(self, body: dict[str, Any], event: RecordEvent) -> None:
        self.events.append((body["metadata"]["name"], event))


@pytest.fixture()
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[MemoryKube, Deps, Posted]]:
    """A rollout on its route; the handlers' Events recorded instead of sent through kopf."""
    kube = MemoryKube({
        ROLLOUT: {"metadata": {"namespace": NS, "name": NAME, "uid": "u1", "generation": 1},
                  "spec": manifest_spec()},
        ROUTE: {"metadata": {"name": NAME}, "spec": {"rules": [{"backendRefs": []}]}}})
    posted = Posted()
    monkeypatch.setattr(handlers, "_post_event", posted)
    deps = Deps(kube=kube, post_event=posted)
    Runtime.slots = None
    yield kube, deps, posted
    Runtime.slots = None
    Runtime.last_error.clear()
    Runtime.failures.clear()
    Runtime.wake.clear()


def kbody(body: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(Any, body))


def once(deps: Deps) -> float | None:
    return asyncio.run(_reconcile_once(deps, NS, NAME, due=0.0))


def test_a_reconcile_from_a_fresh_read_returns_the_cores_requeue(world: Any) -> None:
    kube, deps, posted = world
    assert once(deps) == 2.0
    assert kube.objects[ROLLOUT]["status"]["phase"] == "Progressing"
    assert Runtime.slots is not None and deps.slots is Runtime.slots
    assert [e.reason for _, e in posted.events] == ["FirstRelease"]


def test_a_gone_or_deleting_rollout_ends_the_daemons_loop(world: Any) -> None:
    kube, deps, _ = world
    kube.objects[ROLLOUT]["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert once(deps) is None
    del kube.objects[ROLLOUT]
    assert once(deps) is None


def test_an_expected_error_backs_off_and_warns_once_per_distinct_message(world: Any) -> None:
    kube, deps, posted = world
    kube.fail[("GET", DEPLOYMENTS)] = KubeError(403, "GET", DEPLOYMENTS, "forbidden")
    assert once(deps) == ERROR_BACKOFF_SECONDS
    assert once(deps) == ERROR_BACKOFF_SECONDS
    warnings = [e for _, e in posted.events if e.type == "Warning"]
    assert len(warnings) == 1 and warnings[0].reason == "KubeError"
    assert "403 forbidden" in warnings[0].message
    kube.fail[("GET", DEPLOYMENTS)] = KubeError(500, "GET", DEPLOYMENTS, "etcd is down")
    once(deps)
    assert [e.reason for _, e in posted.events if e.type == "Warning"] == ["KubeError"] * 2
    del kube.fail[("GET", DEPLOYMENTS)]
    assert once(deps) == 2.0
    assert (NS, NAME) not in Runtime.last_error


def test_an_unexpected_error_runs_the_fail_safe_and_doubles_its_backoff(world: Any) -> None:
    kube, deps, posted = world
    once(deps)
    once(deps)  # Healthy on its first revision
    kube.fail[("GET", DEPLOYMENTS)] = RuntimeError("a bug")
    assert [once(deps) for _ in range(3)] == [5.0, 10.0, 20.0]
    st = kube.objects[ROLLOUT]["status"]
    assert "RuntimeError: a bug" in st["message"]
    failed = [e for _, e in posted.events if e.reason == "ReconcileFailed"]
    assert len(failed) == 1 and failed[0].message == "RuntimeError: a bug"
    Runtime.failures[(NS, NAME)] = 20
    assert once(deps) == handlers.MAX_FAILURE_BACKOFF_SECONDS


def test_the_delete_handler_keeps_a_draining_rollout_until_it_drained(
        world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A revision still draining is no error: kopf keeps the finalizer and comes back when the
    drain ends (not at its error backoff)."""
    _, deps, _ = world

    async def draining(_deps: Deps, _body: dict[str, Any]) -> None:
        raise DeletionHeld(12.5, ["09c054e966"])

    monkeypatch.setattr(handlers, "release_before_deletion", draining)
    monkeypatch.setattr(Runtime, "deps", deps)
    with pytest.raises(kopf.TemporaryError,
                       match="revisions 09c054e966 drain for 12s more") as held:
        asyncio.run(on_delete(body=kbody({"metadata": {"namespace": NS, "name": NAME}})))
    assert held.value.delay == 12.5


def test_the_deletion_watchdog_lets_a_draining_rollout_go(
        world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its namespace (and the route) are being deleted: the drain holds nothing there."""
    _, deps, _ = world

    async def draining(_deps: Deps, _body: dict[str, Any]) -> None:
        raise DeletionHeld(12.5, ["09c054e966"])

    monkeypatch.setattr(handlers, "release_before_deletion", draining)
    monkeypatch.setattr(Runtime, "deps", deps)
    asyncio.run(handlers._release_before_deletion({"metadata": {"namespace": NS, "name": NAME}}))


def test_the_delete_handler_asks_kopf_to_retry_an_expected_error(world: Any) -> None:
    kube, deps, _ = world
    Runtime.deps = deps
    try:
        once(deps)
        body = kbody(dict(kube.objects[ROLLOUT]))
        kube.fail[("GET", DEPLOYMENTS)] = KubeError(500, "GET", DEPLOYMENTS, "etcd is down")
        with pytest.raises(kopf.TemporaryError, match=r"returning traffic to stable: .*etcd"):
            asyncio.run(on_delete(body=body))
        del kube.fail[("GET", DEPLOYMENTS)]
        asyncio.run(on_delete(body=body))  # succeeds: the finalizer may go
        # a bug falls back to the fail-safe; when that cannot move the traffic either (it
        # reads the same revisions), the finalizer holds and kopf retries
        kube.fail[("GET", DEPLOYMENTS)] = RuntimeError("a bug")
        with pytest.raises(kopf.TemporaryError, match="returning traffic to stable: a bug"):
            asyncio.run(on_delete(body=kbody(dict(kube.objects[ROLLOUT]))))
        assert "RuntimeError: a bug" in kube.objects[ROLLOUT]["status"]["message"]
    finally:
        Runtime.deps = None


class Stopped:
    """kopf's DaemonStopped as the daemon uses it: falsy until stopped, awaitable."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


def test_the_daemon_sleeps_until_woken_and_ends_when_the_rollout_is_gone(world: Any) -> None:
    kube, deps, _ = world
    Runtime.deps = deps

    async def scenario() -> int:
        daemon = asyncio.create_task(run_rollout(
            stopped=Stopped(), name=NAME, namespace=NS))  # type: ignore[arg-type]
        while "status" not in kube.objects[ROLLOUT]:
            await asyncio.sleep(0.01)
        assert (NS, NAME) in Runtime.wake and NS in Runtime.served_namespaces
        reads = sum(1 for m, p, _ in kube.calls if m == "GET" and p == ROLLOUT)
        del kube.objects[ROLLOUT]
        # a new generation wakes it long before its 2 s requeue
        await wake_on_change(body=kbody({
            "metadata": {"namespace": NS, "name": NAME, "generation": 2},
            "status": {"observedGeneration": 1}}))
        await asyncio.wait_for(daemon, 1.0)
        return reads

    try:
        assert asyncio.run(scenario()) == 1
        assert (NS, NAME) not in Runtime.wake
    finally:
        Runtime.deps = None


def test_the_daemon_stops_when_kopf_stops_it(world: Any) -> None:
    _, deps, _ = world
    Runtime.deps = deps

    async def scenario() -> None:
        stopped = Stopped()
        daemon = asyncio.create_task(run_rollout(
            stopped=stopped, name=NAME, namespace=NS))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        stopped.event.set()
        await asyncio.wait_for(daemon, 1.0)

    try:
        asyncio.run(scenario())
        assert Runtime.wake == {}
    finally:
        Runtime.deps = None


def test_own_status_writes_wake_nobody_requests_and_deletion_do() -> None:
    ev = asyncio.Event()
    Runtime.wake[(NS, NAME)] = ev
    try:
        def wakes(body: dict[str, Any]) -> bool:
            ev.clear()
            asyncio.run(wake_on_change(body=kbody(body)))
            return ev.is_set()

        meta = {"namespace": NS, "name": NAME, "generation": 3}
        assert not wakes({"metadata": meta, "status": {"observedGeneration": 3}})
        assert wakes({"metadata": meta, "status": {"observedGeneration": 3,
                                                   "requests": {"abort": True}}})
        assert wakes({"metadata": {**meta, "deletionTimestamp": "x"},
                      "status": {"observedGeneration": 3}})
        # a drill result the operator has not recorded wakes it; a recorded one does not
        drill = {"annotations": {"rollouts.inference.dev/last-drill": json.dumps(
            {"id": "a" * 32, "verdict": "pass", "summary": "drill pod-kill: pass"})}}
        assert wakes({"metadata": {**meta, **drill}, "status": {"observedGeneration": 3}})
        assert not wakes({"metadata": {**meta, **drill},
                          "status": {"observedGeneration": 3, "drillRecorded": "a" * 32}})
    finally:
        Runtime.wake.clear()


def test_configure_sets_the_projects_finalizer_and_quiets_wakeups_once() -> None:
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    handlers.configure(settings)
    assert settings.persistence.finalizer == FINALIZER == "rollouts.inference.dev/finalizer"
    assert settings.peering.standalone is True
    assert settings.watching.server_timeout == 300
    quiet = [f for f in logging.getLogger("kopf.objects").filters if isinstance(f, _QuietWakeups)]
    assert len(quiet) == 1


def test_kopf_logs_in_with_the_operators_credentials() -> None:
    cfg = Configuration(host="https://api.example:6443",
                        api_key={"BearerToken": "abc123"}, api_key_prefix={"BearerToken": "Bearer"})
    cfg.verify_ssl = False
    info = asyncio.run(handlers._connection_info(cfg, kopf.OperatorSettings()))
    assert info.server == "https://api.example:6443"
    assert (info.scheme, info.token) == ("Bearer", "abc123")
    assert info.insecure is True and info.username is None


def test_metrics_endpoint_serves_the_registry() -> None:
    operator_metrics.REGISTRY.set("inference_rollout_info", 1, namespace="cov",
                                           name="metrics", phase="Healthy")
    try:
        response = asyncio.run(handlers._metrics(None))  # type: ignore[arg-type]
        assert response.content_type == "text/plain"
        assert 'inference_rollout_info{name="metrics",namespace="cov",phase="Healthy"} 1.0' \
            in (response.text or "")
    finally:
        operator_metrics.forget_rollout("cov", "metrics")


def test_cleanup_stops_the_watchdog_and_drains_the_notifier() -> None:
    class Notifier:
        drained: float | None = None

        async def aclose(self, drain_seconds: float) -> None:
            self.drained = drain_seconds

    async def scenario() -> tuple[bool, float | None]:
        notifier = Notifier()
        Runtime.deps = Deps(kube=MemoryKube(), post_event=Posted(),
                            notifier=notifier)  # type: ignore[arg-type]
        Runtime.watchdog = asyncio.create_task(asyncio.sleep(60))
        await handlers.cleanup()
        await asyncio.sleep(0)
        return Runtime.watchdog.cancelled(), notifier.drained

    try:
        assert asyncio.run(scenario()) == (True, 5.0)
    finally:
        Runtime.deps, Runtime.watchdog = None, None


def test_sigusr2_logs_where_every_task_waits(caplog: pytest.LogCaptureFixture) -> None:
    """A reconcile that never happens or never ends explains itself: the e2e harness sends
    SIGUSR2 when a wait times out, and the operator logs each task's stack."""
    async def parked_reconcile() -> None:
        await asyncio.sleep(3600)

    async def go() -> None:
        task = asyncio.create_task(parked_reconcile(), name="run_rollout/ns/chat")
        await asyncio.sleep(0)
        with caplog.at_level(logging.WARNING, "inference_rollout"):
            handlers._log_tasks()
        task.cancel()

    asyncio.run(go())
    assert "SIGUSR2: 2 asyncio tasks" in caplog.text
    assert "task run_rollout/ns/chat:" in caplog.text and "parked_reconcile" in caplog.text
