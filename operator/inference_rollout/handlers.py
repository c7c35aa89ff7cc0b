"""kopf wiring only: when to reconcile which rollout.  No decisions live here.

* One daemon per InferenceRollout loops ``reconcile`` → sleep until the core's requeue time, and
  wakes early when the object changes in a way that matters (new generation, a steering request,
  deletion).  A daemon per object keeps 500 rollouts on their own schedules without a central
  scheduler, and costs one asyncio task each.
* The delete handler (kopf's finalizer, under the project's own name) returns traffic to stable
  before the object goes; with a user-owned route the stable revision is also orphaned, so the
  route keeps a live backend after the rollout's garbage collection.
* kopf's own bookkeeping lives in annotations with the project's prefix, never in our status.
* In namespaces mode a watchdog finishes deletions kopf never hands over (a namespace being
  deleted: see ``deletion_watchdog``), so no namespace stays Terminating on our finalizer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar, cast

import kopf
from aiohttp import web
from kubernetes.client import Configuration

from . import deletion_watchdog, opmetrics
from .api import GROUP, LABEL_REVISION, PLURAL, VERSION
from .api.spec import InferenceRolloutSpec
from .api.status import InferenceRolloutStatus
from .core.types import RecordEvent
from .kube import Kube, KubeError, load_configuration
from .reconciler import Deps, reconcile, rollout_path
from .traffic.router import RouteError
from .workloads.revisions import RevisionError

log = logging.getLogger("inference_rollout")
FINALIZER = f"{GROUP}/finalizer"
ERROR_BACKOFF_SECONDS = 5.0
MAX_CONCURRENT_RECONCILES = 16
NAMESPACE_TERMINATING = "because it is being terminated"


class Runtime:
    """Process-wide state shared by the handlers (set up at startup)."""

    deps: Deps | None = None
    wake: ClassVar[dict[tuple[str, str], asyncio.Event]] = {}
    last_error: ClassVar[dict[tuple[str, str], str]] = {}
    #: Reconciles in flight at once: hundreds of daemons share one connection pool, and a queue
    #: here keeps each reconcile's requests together instead of interleaving them all.
    slots: ClassVar[asyncio.Semaphore | None] = None
    metrics_port: int = 8081
    kubeconfig: str | None = None
    service_proxy: str | None = None  # --service-proxy: the evaluation's HTTP forward proxy
    clusterwide: bool = True  # --all-namespaces; else the deletion watchdog runs
    #: Namespaces whose rollouts this process has served (the deletion watchdog's scope).
    served_namespaces: ClassVar[set[str]] = set()
    watchdog: asyncio.Task[None] | None = None


async def _post_event(body: dict[str, Any], event: RecordEvent) -> None:
    kopf.event(cast(kopf.Body, body), type=event.type, reason=event.reason,
               message=event.message[:1000])


class _QuietWakeups(logging.Filter):
    """Drop kopf's "Handler 'wake_on_change' succeeded." (one line per watch event, hundreds per
    release, each a no-op); its failures and every other handler's lines stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not record.getMessage().startswith(
            "Handler 'wake_on_change'")


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


@kopf.on.login()
def login(settings: kopf.OperatorSettings, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own client (watches, finalizers, Events) logs in like the operator's client: with
    ``--kubeconfig`` when given, which kopf's default logins never read (they know only
    ``$KUBECONFIG``, ``~/.kube/config`` and the pod's ServiceAccount); else kopf's default for
    the ``kubernetes`` package this operator depends on."""
    if Runtime.kubeconfig is None:
        return kopf.login_via_client(settings=settings, **kwargs)
    return _connection_info(load_configuration(Runtime.kubeconfig), settings)


def _connection_info(cfg: Configuration, settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    """A ``kubernetes`` Configuration as kopf's credentials (as ``kopf.login_via_client`` maps
    the package's default Configuration)."""
    header = (cfg.get_api_key_with_prefix("BearerToken")
              or cfg.get_api_key_with_prefix("authorization"))
    scheme, _, token = str(header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
        username=cfg.username or None, password=cfg.password or None,
        scheme=scheme or None, token=token or None,
        certificate_path=cfg.cert_file, private_key_path=cfg.key_file,
        trust_env=settings.networking.trust_env)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure(settings)
    Runtime.deps = Deps(kube=Kube(load_configuration(Runtime.kubeconfig)), post_event=_post_event,
                        service_proxy=Runtime.service_proxy)
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    runner = web.AppRunner(app, access_log=None)  # a scrape every few seconds is not news
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", Runtime.metrics_port).start()  # a pod port: all interfaces
    log.info("metrics on :%d/metrics", Runtime.metrics_port)
    if not Runtime.clusterwide:
        Runtime.watchdog = asyncio.create_task(deletion_watchdog.run(
            Runtime.deps.kube, Runtime.served_namespaces, FINALIZER,
            _release_before_deletion, Runtime.deps.now))


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    if Runtime.watchdog is not None:
        Runtime.watchdog.cancel()


async def _metrics(_request: web.Request) -> web.Response:
    return web.Response(text=opmetrics.REGISTRY.render(), content_type="text/plain")


def _key(namespace: str | None, name: str | None) -> tuple[str, str]:
    return (namespace or "", name or "")


@kopf.on.event(GROUP, VERSION, PLURAL)
async def wake_on_change(body: kopf.Body, **_: Any) -> None:
    """Wake the rollout's daemon for changes it must act on now, not for its own status
    writes (which would only cause a no-op reconcile)."""
    meta = body.get("metadata", {})
    status = body.get("status") or {}
    requests = status.get("requests") or {}
    generation_moved = meta.get("generation") != status.get("observedGeneration")
    if generation_moved or any(requests.values()) or meta.get("deletionTimestamp"):
        ev = Runtime.wake.get(_key(meta.get("namespace"), meta.get("name")))
        if ev is not None:
            ev.set()


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=5.0)
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
        opmetrics.REGISTRY.forget(namespace=namespace, name=name)


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
        async with Runtime.slots:  # the read too: a body read while queued would be stale
            # Measured once a slot is ours: the wait for one is the lag a busy operator adds.
            opmetrics.REGISTRY.observe("inference_rollout_reconcile_lag_seconds",
                                       max(0.0, time.monotonic() - due))
            body = await deps.kube.get_or_none(rollout_path(namespace, name))
            if body is None or body["metadata"].get("deletionTimestamp"):
                return None
            delay = await reconcile(deps, body)
        Runtime.last_error.pop(key, None)
        return delay
    except (RouteError, RevisionError, KubeError) as e:
        opmetrics.REGISTRY.inc("inference_rollout_reconcile_errors_total", kind=type(e).__name__)
        log.warning("%s/%s: %s", namespace, name, e)
        # One Warning Event per distinct problem, so `kubectl describe` shows why nothing moves
        # (a missing route, a refused write) without an Event every retry.
        if body is not None and Runtime.last_error.get(key) != str(e):
            Runtime.last_error[key] = str(e)
            await _post_event(body, RecordEvent("Warning", type(e).__name__, str(e)))
        return ERROR_BACKOFF_SECONDS


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def on_delete(body: kopf.Body, name: str, namespace: str | None, **_: Any) -> None:
    """Return all traffic to stable before the rollout (and, by garbage collection, its
    revisions) goes.  Retried by kopf until it succeeds."""
    try:
        await _release_before_deletion(dict(body))
    except (RouteError, KubeError, RevisionError) as e:
        raise kopf.TemporaryError(f"returning traffic to stable: {e}", delay=2) from e


async def _release_before_deletion(raw: dict[str, Any]) -> None:
    """The delete handler's work (also the deletion watchdog's): raises when it must be retried."""
    deps = Runtime.deps
    assert deps is not None
    namespace, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
    try:
        await reconcile(deps, raw)
    except (RouteError, KubeError, RevisionError) as e:
        if NAMESPACE_TERMINATING in str(e):
            # The whole namespace is going: its route and backends go with it, and the API
            # server refuses every write there.  Holding the finalizer would only block it.
            log.info("%s/%s: namespace terminating; nothing left to protect", namespace, name)
            return
        raise
    spec = InferenceRolloutSpec.parse(raw["spec"])
    status = InferenceRolloutStatus.parse(raw.get("status"))
    if spec.traffic.gateway_api.http_route_ref is not None and status.stable_revision:
        await _orphan_revision(deps.kube, namespace, name, status.stable_revision)


async def _orphan_revision(kube: Kube, namespace: str, rollout: str, revision: str) -> None:
    """Drop the owner reference of the stable's Deployment and Service: the user's route still
    points at them, so garbage collection must not take them."""
    from .core.revision import revision_name
    from .kube import ns_path

    obj = revision_name(rollout, revision)
    for path in (ns_path("apps", "v1", namespace, "deployments", obj),
                 ns_path("", "v1", namespace, "services", obj)):
        try:
            await kube.merge_patch(path, {"metadata": {"ownerReferences": None,
                                                       "labels": {LABEL_REVISION: revision}}})
        except KubeError as e:
            if e.status != 404:
                raise kopf.TemporaryError(f"orphaning {path}: {e}", delay=2) from e
