"""kopf wiring only: when to reconcile which rollout.  No decisions live here.

* One daemon per InferenceRollout loops ``reconcile`` → sleep until the core's requeue time, and
  wakes early when the object changes in a way that matters (new generation, a steering request,
  deletion), when a revision's Deployment has news (its controller caught up: pods Ready or
  lost) and when the gateway answers for the rollout's route (``core.wakeups``).  A daemon per
  object keeps 500 rollouts on their own schedules without a central scheduler, and costs one
  asyncio task each.
* The delete handler (kopf's finalizer, under the project's own name) returns traffic to stable
  before the object goes; with a user-owned route the stable revision is also orphaned, so the
  route keeps a live backend after the rollout's garbage collection.
* kopf's own bookkeeping lives in annotations with the project's prefix, never in our status.
* In namespaces mode a watchdog finishes deletions kopf never hands over (a namespace being
  deleted: see ``deletion_watchdog``), so no namespace stays Terminating on our finalizer.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import kopf
from aiohttp import web
from kubernetes.aio.client import Configuration

from . import deletion_watchdog, events, operator_metrics
from .api import GROUP, LABEL_ROLLOUT, PLURAL, VERSION
from .core import wakeups
from .core.types import RecordEvent
from .kube import Kube, load_configuration
from .notify.delivery import Notifier, Settings
from .paths import rollout_path
from .reconciler import (
    ADAPTER_DRAIN_MAX_SECONDS,
    ADAPTER_DRAIN_SECONDS,
    EXPECTED_ERRORS,
    DeletionHeld,
    Deps,
    fail_safe,
    last_drill,
    reconcile,
    release_before_deletion,
)

log = logging.getLogger("inference_rollout")

_Handler = TypeVar("_Handler", bound=Callable[..., Awaitable[Any]])


def _handler(kopf_decorator: Callable[[Callable[..., Any]], object]
             ) -> Callable[[_Handler], _Handler]:
    """Registers a handler with ``kopf_decorator`` (one of kopf's) and keeps the function's own
    type: kopf's decorators return the function itself, but typed as kopf's handler protocol,
    which needs every keyword kopf passes (the tests call the handlers with fewer)."""
    def register(fn: _Handler) -> _Handler:
        kopf_decorator(fn)
        return fn
    return register
FINALIZER = f"{GROUP}/finalizer"
ERROR_BACKOFF_SECONDS = 5.0
#: After an unexpected exception: 5 s, doubled per failure in a row, at most this long.
MAX_FAILURE_BACKOFF_SECONDS = 300.0
MAX_CONCURRENT_RECONCILES = 16


class Runtime:
    """Process-wide state shared by the handlers (set up at startup)."""

    deps: Deps | None = None
    wake: ClassVar[dict[tuple[str, str], asyncio.Event]] = {}
    last_error: ClassVar[dict[tuple[str, str], str]] = {}
    #: Unexpected failures in a row per rollout (their backoff doubles).
    failures: ClassVar[dict[tuple[str, str], int]] = {}
    #: Reconciles in flight at once: hundreds of daemons share one connection pool, and a queue
    #: here keeps each reconcile's requests together instead of interleaving them all.
    slots: ClassVar[asyncio.Semaphore | None] = None
    metrics_port: int = 8081
    kubeconfig: str | None = None
    service_proxy: str | None = None  # --service-proxy: the evaluation's HTTP forward proxy
    prometheus_allow: tuple[str, ...] = ()  # --prometheus-allow (docs/security.md)
    prometheus_allow_any: bool = False  # --prometheus-allow-any: the opt-out
    confine_queries: bool = True  # --confine-queries, on unless --no-confine-queries
    adapter_releases: bool = False  # --adapter-releases (docs/adapters.md)
    adapter_drain_seconds: float = ADAPTER_DRAIN_SECONDS  # --adapter-drain-seconds
    adapter_drain_max_seconds: float = ADAPTER_DRAIN_MAX_SECONDS  # --adapter-drain-max-seconds
    clusterwide: bool = True  # --all-namespaces; else the deletion watchdog runs
    namespace_patterns: tuple[str, ...] = ()  # --namespace (the watchdog's scope, with served)
    notify: Settings = Settings()  # --notify-allow, --notify-secret (docs/notifications.md)
    #: Namespaces whose rollouts this process has served (the deletion watchdog's scope).
    served_namespaces: ClassVar[set[str]] = set()
    watchdog: asyncio.Task[None] | None = None


async def _post_event(body: dict[str, Any], event: RecordEvent) -> None:
    """Through :mod:`.events`, not ``kopf.event``: an identical Event again is counted on the
    existing one (as client-go's recorder does), so a retried decision does not show twice."""
    deps = Runtime.deps
    if deps is not None:  # before startup there is no client (and nothing to report yet)
        await events.post_event(deps.kube, body, event, deps.now())


_WAKEUP_HANDLERS = tuple(f"Handler '{name}'" for name in (
    "wake_on_change", "wake_on_deployment", "wake_on_route"))


class _QuietWakeups(logging.Filter):
    """Drop kopf's "Handler 'wake_on_change' succeeded." and its siblings' (one line per watch
    event, hundreds per release, each a no-op); their failures and every other handler's lines
    stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not record.getMessage().startswith(
            _WAKEUP_HANDLERS)


def configure(settings: kopf.OperatorSettings) -> None:
    # One line per API request drowns the rollout story: requests are counted in /metrics.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, _QuietWakeups) for f in objects.filters):
        objects.addFilter(_QuietWakeups())
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.peering.standalone = True
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 30


@_handler(kopf.on.login())
async def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo | None:
    """kopf's own client (watches, finalizers, Events) logs in like the operator's client, with
    the same choice of credentials (``kube.load_configuration``, as kubectl chooses): kopf's
    default login reads no ``--kubeconfig`` and tries the pod's ServiceAccount *before* a
    kubeconfig.  kopf logs in again when the API server refuses the credentials (an expired
    exec-plugin or ServiceAccount token): this runs again and gets a current one."""
    return await _connection_info(await load_configuration(Runtime.kubeconfig), settings)


async def _connection_info(cfg: Configuration,
                           settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    """A ``kubernetes.aio`` Configuration as kopf's credentials (as ``kopf.login_via_client``
    maps the package's default Configuration)."""
    header = (await cfg.get_api_key_with_prefix("BearerToken")
              or await cfg.get_api_key_with_prefix("authorization"))
    scheme, _, token = str(header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
        username=cfg.username or None, password=cfg.password or None,
        scheme=scheme or None, token=token or None,
        certificate_path=cfg.cert_file, private_key_path=cfg.key_file,
        trust_env=settings.networking.trust_env)


@_handler(kopf.on.startup())
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure(settings)
    kube = Kube(await load_configuration(Runtime.kubeconfig))
    Runtime.deps = Deps(kube=kube, post_event=_post_event,
                        service_proxy=Runtime.service_proxy,
                        prometheus_allow=Runtime.prometheus_allow,
                        prometheus_allow_any=Runtime.prometheus_allow_any,
                        confine_queries=Runtime.confine_queries,
                        adapter_releases=Runtime.adapter_releases,
                        adapter_drain_seconds=Runtime.adapter_drain_seconds,
                        adapter_drain_max_seconds=Runtime.adapter_drain_max_seconds,
                        notifier=Notifier(kube, Runtime.notify),
                        wake=_wake)
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    runner = web.AppRunner(app, access_log=None)  # a scrape every few seconds is not news
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", Runtime.metrics_port).start()  # a pod port: all interfaces
    log.info("metrics on :%d/metrics", Runtime.metrics_port)
    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals off the main thread
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, _log_tasks)
    if not Runtime.clusterwide:
        Runtime.watchdog = asyncio.create_task(deletion_watchdog.run(
            kube, Runtime.served_namespaces, FINALIZER,
            _release_before_deletion, Runtime.deps.now, Runtime.namespace_patterns))


def _log_tasks() -> None:
    """SIGUSR2: log where every task of the event loop waits, one warning per task. For a
    reconcile that never happens or never ends (the e2e harness sends it when a wait times out,
    so such a failure shows what the operator was doing)."""
    tasks = asyncio.all_tasks()
    log.warning("SIGUSR2: %d asyncio tasks", len(tasks))
    for task in list(tasks)[:300]:
        out = io.StringIO()
        task.print_stack(limit=12, file=out)
        log.warning("task %s:\n%s", task.get_name(), out.getvalue()[-3000:])


async def _release_before_deletion(body: dict[str, Any]) -> None:
    """The deletion watchdog's cleanup: a rollout it finds has been marked for deletion for 30 s
    in a namespace being deleted, whose route goes with it: once traffic is on stable, a
    revision still draining holds nothing (nothing will route to it for long)."""
    assert Runtime.deps is not None
    try:
        await release_before_deletion(Runtime.deps, body)
    except DeletionHeld as e:
        log.info("%s/%s: %s; its namespace is being deleted, so it goes now",
                 body["metadata"]["namespace"], body["metadata"]["name"], e)
    operator_metrics.forget_rollout(body["metadata"]["namespace"], body["metadata"]["name"])


@_handler(kopf.on.cleanup())
async def cleanup(**_: Any) -> None:
    if Runtime.watchdog is not None:
        Runtime.watchdog.cancel()
    if Runtime.deps is not None and Runtime.deps.notifier is not None:
        await Runtime.deps.notifier.aclose(drain_seconds=5.0)
    if Runtime.deps is not None and Runtime.deps.lora is not None:
        await Runtime.deps.lora.client.aclose()


async def _metrics(_request: web.Request) -> web.Response:
    return web.Response(text=operator_metrics.REGISTRY.render(), content_type="text/plain")


def _key(namespace: str | None, name: str | None) -> tuple[str, str]:
    return (namespace or "", name or "")


@_handler(kopf.on.event(GROUP, VERSION, PLURAL))
async def wake_on_change(body: kopf.Body, **_: Any) -> None:
    """Wake the rollout's daemon for changes it must act on now, not for its own status
    writes (which would only cause a no-op reconcile)."""
    meta = body.get("metadata", {})
    status = body.get("status") or {}
    requests = status.get("requests") or {}
    generation_moved = meta.get("generation") != status.get("observedGeneration")
    drill = last_drill(dict(body))
    new_drill = drill is not None and drill.id != status.get("drillRecorded")
    if generation_moved or any(requests.values()) or meta.get("deletionTimestamp") or new_drill:
        _wake(meta.get("namespace"), meta.get("name"))


@_handler(kopf.on.event("apps", "v1", "deployments", labels={LABEL_ROLLOUT: kopf.PRESENT}))
async def wake_on_deployment(body: kopf.Body, **_: Any) -> None:
    """A revision's pods became Ready (or were lost): the step need not wait for the poll."""
    rollout = wakeups.deployment_rollout(dict(body))
    if rollout is not None:
        _wake(body.get("metadata", {}).get("namespace"), rollout)


@_handler(kopf.on.event("gateway.networking.k8s.io", "v1", "httproutes"))
async def wake_on_route(body: kopf.Body, **_: Any) -> None:
    """The gateway answered for the route's current generation: a pending weight's hold may
    start (or a refusal be acted on) now."""
    namespace = body.get("metadata", {}).get("namespace")
    for rollout in wakeups.route_rollouts(dict(body)):
        _wake(namespace, rollout)


def _wake(namespace: str | None, name: str | None) -> None:
    ev = Runtime.wake.get(_key(namespace, name))
    if ev is not None:
        ev.set()


@_handler(kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=5.0))
async def run_rollout(stopped: kopf.DaemonStopped, name: str, namespace: str | None,
                      **_: Any) -> None:
    deps = Runtime.deps
    assert deps is not None
    assert namespace is not None  # the CRD is namespaced
    key = _key(namespace, name)
    Runtime.served_namespaces.add(namespace)
    wake = Runtime.wake.setdefault(key, asyncio.Event())
    due = time.monotonic()
    try:
        while not stopped:
            wake.clear()
            delay = await _reconcile_once(deps, namespace, name, due)
            if delay is None:
                return
            due = time.monotonic() + delay
            if await _sleep_or_wake(wake, stopped, delay):
                due = time.monotonic()
    finally:
        Runtime.wake.pop(key, None)
        Runtime.last_error.pop(key, None)
        Runtime.failures.pop(key, None)
        operator_metrics.forget_rollout(namespace, name)  # deleted (or the operator stops)


async def _sleep_or_wake(wake: asyncio.Event, stopped: kopf.DaemonStopped,
                         delay: float) -> bool:
    """Sleep ``delay`` seconds; return early (True) when woken or when the daemon is stopped."""
    waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())}
    done, pending = await asyncio.wait(waiters, timeout=delay,
                                       return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    return bool(done)


async def _reconcile_once(deps: Deps, namespace: str, name: str, due: float) -> float | None:
    """One reconcile from a fresh read; None when the object is gone or being deleted."""
    key = _key(namespace, name)
    body = None
    try:
        if Runtime.slots is None:
            Runtime.slots = asyncio.Semaphore(MAX_CONCURRENT_RECONCILES)
            deps.slots = Runtime.slots  # given back during Prometheus and evaluation I/O
        async with Runtime.slots:  # the read too: a body read while queued would be stale
            # Measured once a slot is ours: the wait for one is the lag a busy operator adds.
            operator_metrics.REGISTRY.observe("inference_rollout_reconcile_lag_seconds",
                                       max(0.0, time.monotonic() - due))
            body = await deps.kube.get_or_none(rollout_path(namespace, name))
            if body is None or body["metadata"].get("deletionTimestamp"):
                return None
            delay = await reconcile(deps, body)
        Runtime.last_error.pop(key, None)
        Runtime.failures.pop(key, None)
        return delay
    except EXPECTED_ERRORS as e:
        operator_metrics.REGISTRY.inc("inference_rollout_reconcile_errors_total",
                                      kind=type(e).__name__)
        log.warning("%s/%s: %s", namespace, name, e)
        await _warn_once(key, body, type(e).__name__, str(e))
        return ERROR_BACKOFF_SECONDS
    except Exception as e:  # never a silent kopf retry loop
        # A bug, or input nothing else caught: the release must not go on unwatched.
        operator_metrics.REGISTRY.inc("inference_rollout_reconcile_errors_total",
                                      kind=type(e).__name__)
        log.exception("%s/%s: reconcile failed", namespace, name)
        failures = Runtime.failures[key] = Runtime.failures.get(key, 0) + 1
        if body is not None:
            await fail_safe(deps, body, e)
            await _warn_once(key, body, "ReconcileFailed", f"{type(e).__name__}: {e}")
        return min(MAX_FAILURE_BACKOFF_SECONDS, ERROR_BACKOFF_SECONDS * 2.0 ** (failures - 1))


async def _warn_once(key: tuple[str, str], body: dict[str, Any] | None, reason: str,
                     message: str) -> None:
    """One Warning Event per distinct problem, so `kubectl describe` shows why nothing moves
    (a missing route, a refused write) without an Event every retry."""
    if body is not None and Runtime.last_error.get(key) != message:
        Runtime.last_error[key] = message
        await _post_event(body, RecordEvent("Warning", reason, message))


@_handler(kopf.on.delete(GROUP, VERSION, PLURAL))
async def on_delete(body: kopf.Body, **_: Any) -> None:
    """Return all traffic to stable before the rollout (and, by garbage collection, its
    revisions) goes.  Retried by kopf until it succeeds; an unexpected failure falls back to
    moving the traffic alone, and lets the rollout go once that is done."""
    deps = Runtime.deps
    assert deps is not None
    try:
        await release_before_deletion(deps, dict(body))
    except DeletionHeld as e:
        raise kopf.TemporaryError(str(e), delay=max(1.0, e.seconds)) from e
    except EXPECTED_ERRORS as e:
        raise kopf.TemporaryError(f"returning traffic to stable: {e}", delay=2) from e
    except Exception as e:  # a finalizer must not hold on a bug
        log.exception("returning traffic to stable before deletion failed")
        if not await fail_safe(deps, dict(body), e):
            raise kopf.TemporaryError(f"returning traffic to stable: {e}", delay=5) from e
    operator_metrics.forget_rollout(body["metadata"]["namespace"], body["metadata"]["name"])
