"""One reconcile of one rollout: read the world, call the pure core, apply its actions, write
the status.

This is the only place where observations are gathered and actions are carried out; it makes no
decisions of its own.  It knows nothing of kopf either (handlers.py drives it), so the benchmark
and the tests can call it directly against a real API server.

Order matters for safety: actions are applied in the order the core returned them (a weight change
comes before any scale-down), and the status is written last, guarded by resourceVersion.  If the
process dies between the two, the next reconcile starts from the old status, sees the world as the
actions left it, and repeats only idempotent writes.  A status write that meets a newer object
(409: another replica or the CLI wrote meanwhile) is never retried with the same decision: the
reconcile runs again from what the server holds (``fenced``), as if this one had crashed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import httpx
from pydantic import ValidationError

from . import operator_metrics
from .api import ANN_LAST_DRILL, DRILL_ID_PATTERN
from .api import reasons as r
from .api.spec import (
    PROBE_TEMPLATES,
    InferenceRolloutSpec,
    MetricSpec,
    NotificationsSpec,
    PodTemplate,
    TrafficSpec,
)
from .api.status import InferenceRolloutStatus
from .bounded_http import sanitize
from .budget.lint import lint_manifest
from .config_objects import Missing, configmap_text, secret_text
from .core import validation
from .core.decide import IDLE_SECONDS, analysis_due, decide
from .core.evaluation_gate import begun as evaluation_begun
from .core.evaluation_gate import evaluation_due
from .core.notices import notices
from .core.revision import template_hash
from .core.timeutil import from_iso
from .core.types import (
    NO_HEADER_ROUTES,
    Action,
    Decision,
    DeleteRevision,
    DrillResult,
    EnsureRevision,
    EvaluationOutcome,
    Measurement,
    MeasurementError,
    Observation,
    OrphanRevision,
    ProbeCounts,
    RecordEvent,
    RevisionState,
    SetWeights,
)
from .evaluation.cases import CasesError, parse_cases
from .evaluation.probes import Probers, ProbeTarget, RolloutProbes, not_probing
from .evaluation.probes import measurement as probe_measurement
from .evaluation.runner import run_evaluation, served_model, service_url
from .kube import KubeError
from .kube_protocol import KubeClient
from .metrics.measure import measure
from .metrics.source import BEARER_TOKEN, MetricSource, PrometheusSource, Unreachable
from .metrics.tenancy import (
    FailingSource,
    NamespaceConfined,
    address_allowed,
    refused,
    unconfined,
)
from .notify.delivery import Notifier
from .paths import rollout_path
from .traffic.gateway import HTTPRouteRouter
from .traffic.header_routes import HeaderRouting
from .traffic.router import RouteError, RouteMissing, RouteState, TrafficRouter
from .workloads.adapter_pods import AdapterPods
from .workloads.adapter_release import (
    VersionRevisions,
    blocked,
    move_pods,
    released_adapter,
    status_pods,
    unread,
    version_pods,
)
from .workloads.adapter_world import AdapterWorld
from .workloads.adapter_world import observe as observe_adapters
from .workloads.lora import VLLMAdapters
from .workloads.revisions import RevisionError, Revisions

log = logging.getLogger("inference_rollout")

EventSink = Callable[[dict[str, Any], RecordEvent], Awaitable[None]]

#: The errors a reconcile expects (the API server or the route refused something): retried soon.
#: Anything else is a bug or input nothing else caught: see :func:`fail_safe`.
EXPECTED_ERRORS = (RouteError, RevisionError, KubeError)
#: The API server's words when a namespace is being deleted: every write there is refused.
NAMESPACE_TERMINATING = "because it is being terminated"
#: vLLM's own default port: the last resort for a stable with no Service and no backendRef left.
DEFAULT_SERVING_PORT = 8000
#: A pod leaving a set's endpoints waits at least this long before its adapters change: the
#: endpoint slice and the gateway drop it within about a second.
ADAPTER_DRAIN_SECONDS = 3.0
#: ... and then as long as its vLLM reports requests running or waiting, at most this long
#: from its eviction: a long generation finishes on the adapter it started on.
ADAPTER_DRAIN_MAX_SECONDS = 600.0
#: Adapters added without a template change to pods started without them (no adapter-set
#: label, perhaps no --enable-lora): refused, since no pod of theirs can be moved safely.
ADAPTERS_ON_PLAIN_PODS = (
    "spec.adapters: this rollout's pods were started without adapters; add spec.adapters in the "
    "same edit as a template change (for instance the --enable-lora flag an adapter needs), "
    "which releases new pods that load them before they take traffic")
#: How soon a reconcile follows one that moved pods: the next move waits on reading them back.
ADAPTER_MOVE_POLL_SECONDS = 0.5


class PooledSource(MetricSource, Protocol):
    """A cached Prometheus client (:attr:`Deps.sources`): closed once evicted and its queries'
    timeout has passed."""

    timeout_s: float

    async def aclose(self) -> None: ...


@dataclass
class Deps:
    """What a reconcile needs from outside: the API, Prometheus, events, a clock."""

    kube: KubeClient
    post_event: EventSink
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    service_proxy: str | None = None  # the evaluation reaches revision Services through it
    #: The reconcile slots the handlers hold a reconcile in (None: no limit, e.g. in tests).
    slots: asyncio.Semaphore | None = None
    #: Tenancy settings (docs/security.md): the Prometheus addresses rollouts may name (empty:
    #: any), and whether every query is confined to the rollout's namespace.
    #: Secure by default: no address is allowed until listed, unless ``prometheus_allow_any``.
    prometheus_allow: tuple[str, ...] = ()
    prometheus_allow_any: bool = False
    confine_queries: bool = True
    #: One client (connection pool) per address, timeout and token, least recently used first;
    #: at most ``max_sources``, so addresses a tenant tries one after another cannot pile up.
    sources: OrderedDict[tuple[str, float, str | None], PooledSource] = field(
        default_factory=OrderedDict)
    max_sources: int = 32
    _closing: set[asyncio.Task[None]] = field(default_factory=set)
    lint_cache: dict[tuple[str, int, tuple[str, ...] | None], list[str]] = field(
        default_factory=dict)
    #: Where notices go (docs/notifications.md); None: nowhere (tests, the benchmark).
    notifier: Notifier | None = None
    #: Every rollout's probes (``spec.analysis.probes``), made on first use.
    probers: Probers | None = None
    #: Wakes a rollout's reconcile loop now (the handlers' daemon); None: nothing to wake.
    wake: Callable[[str, str], None] | None = None
    #: ``--adapter-releases`` (a preview, docs/adapters.md): rollouts may name adapters.
    adapter_releases: bool = False
    #: How long a pod taken out of its Service's endpoints drains before its adapters change:
    #: at least the first, then while it has requests in flight, at most the second.
    adapter_drain_seconds: float = ADAPTER_DRAIN_SECONDS
    adapter_drain_max_seconds: float = ADAPTER_DRAIN_MAX_SECONDS
    lora: VLLMAdapters | None = None

    def adapter_pods(self, namespace: str) -> AdapterPods:
        """The pods of a rollout with adapters, read and moved through one shared client, at
        each pod's own address: never through ``service_proxy``, which forwards to Services
        (a pod's adapters are its own; through a Service another pod would answer)."""
        if self.lora is None:
            self.lora = VLLMAdapters(httpx.AsyncClient(trust_env=False))
        return AdapterPods(self.kube, self.lora, namespace)

    def probes(self) -> Probers:
        if self.probers is None:
            self.probers = Probers(proxy=self.service_proxy, on_bad=self.wake)
        return self.probers

    def probing(self, ns: str, name: str, canary: str | None) -> RolloutProbes | None:
        """This process's probes of ``canary`` (None: none running)."""
        return self.probers.get(ns, name, canary) if self.probers is not None else None

    def notify(self, body: dict[str, Any], old: InferenceRolloutStatus,
               decision: Decision) -> None:
        """Hand the decision's notices to the notifier's queue (never awaits, never raises):
        called once the status that records the decision is written.  Only the spec's
        ``notifications`` are read, so a rollback by :func:`fail_safe` is told too."""
        if self.notifier is None:
            return
        try:
            wanted = NotificationsSpec.model_validate(
                (body.get("spec") or {}).get("notifications") or {})
        except ValidationError:
            wanted = NotificationsSpec()
        meta = body["metadata"]
        self.notifier.offer(meta["namespace"], meta["name"],
                            wanted.secret_ref.name if wanted.secret_ref else None,
                            wanted.events, notices(old, decision))

    def lint_errors(self, body: dict[str, Any], stable_args: tuple[str, ...] | None) -> list[str]:
        """The principle lints' error findings (warnings go to `kubectl inference-rollout lint`),
        computed once per generation and stable revision."""
        key = (body["metadata"]["uid"], int(body["metadata"].get("generation", 0)), stable_args)
        if key not in self.lint_cache:
            if len(self.lint_cache) > 4096:
                self.lint_cache.clear()
            result = lint_manifest(body, stable_args)
            self.lint_cache[key] = [f"{f.code} {f.field}: {f.message}"
                                    for f in result.findings if f.is_error]
        return self.lint_cache[key]

    async def source_for(self, spec: InferenceRolloutSpec, namespace: str) -> MetricSource:
        prom = spec.analysis.prometheus
        assert prom is not None
        if not self.prometheus_allow_any and not address_allowed(prom.address,
                                                                 self.prometheus_allow):
            # Decided before the token is read: a tenant's token never goes to such an address.
            return refused(prom.address)
        token = None
        if prom.bearer_token_secret_ref is not None:
            ref = prom.bearer_token_secret_ref
            value = await secret_text(self.kube, namespace, ref.name, ref.key)
            if isinstance(value, Missing):
                return FailingSource(Unreachable(f"Prometheus token: {value}"))
            token = "\n" if value is None else value  # not base64 of text: refused below
            if token and not BEARER_TOKEN.match(token):  # the message never quotes the token
                return FailingSource(Unreachable(
                    f"Prometheus token: Secret {ref.name} key {ref.key} is not a bearer token "
                    "(letters, digits and -._~+/ only)"))
        key = (prom.address, prom.timeout_seconds, token)
        source = self.sources.pop(key, None) or PrometheusSource.from_spec(prom, bearer_token=token)
        self.sources[key] = source  # now the most recently used
        while len(self.sources) > self.max_sources:
            _, evicted = self.sources.popitem(last=False)
            task = asyncio.create_task(_close_after_its_queries(evicted))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return NamespaceConfined(source, namespace) if self.confine_queries else source


def last_drill(body: dict[str, Any]) -> DrillResult | None:
    """The result the drill CLI left on the rollout (annotation ``last-drill``), or None when
    there is none or it is not one (anyone who may annotate the rollout can write it: it only
    ever becomes an Event and a notice of this rollout, with its text sanitised)."""
    text = ((body.get("metadata") or {}).get("annotations") or {}).get(ANN_LAST_DRILL)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not re.fullmatch(DRILL_ID_PATTERN, str(data.get("id"))) \
            or data.get("verdict") not in ("pass", "fail"):
        return None
    return DrillResult(str(data["id"]), data["verdict"] == "pass",
                       sanitize(str(data.get("summary") or f"drill: {data['verdict']}"), 300))


async def _close_after_its_queries(source: PooledSource) -> None:
    """Close an evicted client once a query it may still be serving has timed out."""
    await asyncio.sleep(source.timeout_s + 1)
    await source.aclose()


async def reconcile(deps: Deps, body: dict[str, Any]) -> float:
    """Reconcile one rollout once; return seconds until it should be looked at again.

    Fenced: when the status write meets a newer object (409), someone else (another replica, the
    CLI) wrote meanwhile, and this decision was made from facts that are no longer true.  It is
    never written over theirs: the object is read again and the whole reconcile runs again from
    what the server holds (:func:`fenced`)."""
    return await fenced(deps, body, _reconcile, gone=IDLE_SECONDS)


async def _reconcile(deps: Deps, body: dict[str, Any]) -> float:
    meta = body["metadata"]
    ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
    generation = int(meta.get("generation", 0))
    try:
        status = InferenceRolloutStatus.parse(body.get("status"))
    except ValidationError as e:
        await _refuse_status(deps, body, e, generation)
        return IDLE_SECONDS
    deleting = bool(meta.get("deletionTimestamp"))
    try:
        spec = InferenceRolloutSpec.parse(body["spec"])
    except ValidationError as e:
        problems = validation.describe_validation_error(e)
        new = validation.unparseable_status(status, problems, generation, deps.now())
        await _traffic_to_stable(deps, body, status, deleting)
        await write_status(deps, body, status, new)
        return IDLE_SECONDS
    revisions = Revisions(deps.kube, ns, name, uid, spec.traffic.gateway_api)
    now = deps.now()
    spec_template = template_hash(body["spec"]["template"])
    seen = await _adapter_world(deps, spec, status, spec_template, ns, name, revisions)
    if seen is not None:
        world_revisions, templates, spec_key = (seen.seen.revisions, seen.seen.templates,
                                                seen.spec_version)
    else:
        templates, spec_key = {}, spec_template
        world_revisions = await revisions.observe()
    router = _router(deps, body, spec.traffic, spec.template.serving_port(), world_revisions)
    stable_seen = world_revisions.get(status.stable_revision or "")
    invalid = validation.problems(spec, name, deps.adapter_releases) + deps.lint_errors(
        body, stable_seen.args if stable_seen else None)
    if seen is not None and spec.adapters and status.stable_revision == spec_template \
            and status.stable_revision not in seen.versions:
        invalid.append(ADAPTERS_ON_PLAIN_PODS)
    route = await _route(router, deleting)
    measurements = None
    if analysis_due(spec, status, now, _bad_news_at(deps, ns, name, status)) and not deleting:
        async with outside_slot(deps):
            measurements = await _measure(deps, spec, status, ns, name,
                                          None if seen is None else version_pods(seen))
        now = deps.now()
    evaluation = None
    if not deleting and evaluation_due(spec, status, now, world_revisions, templates):
        # Recorded as begun first: if this process dies during the run, the next one counts
        # it as an error instead of starting it again at once (core/evaluation_gate.py).
        begun_status = evaluation_begun(status, now)
        await write_status(deps, body, status, begun_status)
        status = begun_status
        async with outside_slot(deps):
            evaluation = await _evaluate(deps, spec, status, ns, name, world_revisions,
                                         released_adapter(seen, status.stable_revision,
                                                          status.canary_revision))
        now = deps.now()
    world = Observation(
        generation=generation,
        template_hash=spec_key,
        revisions=world_revisions,
        templates=templates,
        route=None if route is None else route.weights,
        route_acceptance=None if route is None else route.acceptance,
        route_header_routes=NO_HEADER_ROUTES if route is None else route.header_routes,
        measurements=measurements,
        evaluation=evaluation,
        invalid=tuple(invalid),
        deleting=deleting,
        deleting_since=from_iso(meta.get("deletionTimestamp")),
        rollout=name,
        drill=last_drill(body),
        probes=_probe_counts(deps, ns, name, status.canary_revision),
    )
    decision = decide(spec, status, world, now)
    decided_at = time.monotonic()
    acting: Revisions | VersionRevisions = revisions
    if seen is not None:
        decision.status.adapter_pods = status_pods(seen) or None
        acting = VersionRevisions(revisions, seen, decision.status.stable_revision,
                                  decision.status.canary_revision)
    if decision.rolled_back:
        # A rollback is recorded before traffic moves: if the process dies in between, the
        # next reconcile reads `aborted` and finishes moving it; it can never decide anew from
        # the old status (with a new Prometheus answer) and send traffic back to the canary.
        await write_status(deps, body, status, decision.status)
        deps.notify(body, status, decision)  # now: a failed write below must not lose it
        try:
            # Traffic moves next, before the Events are told: each Event is a round trip
            # or two, and users are on the failing canary until the route is written.
            await apply_actions(deps, body, decision, acting, router, spec.template,
                                world.template_hash)
        finally:
            await post_events(deps, body, decision)  # recorded: told even if a write failed
    else:
        await apply_actions(deps, body, decision, acting, router, spec.template,
                            world.template_hash)
        await write_status(deps, body, status, decision.status)
        await post_events(deps, body, decision)
        deps.notify(body, status, decision)
    if any(isinstance(a, SetWeights) for a in decision.actions):
        operator_metrics.REGISTRY.observe("inference_rollout_decision_to_write_seconds",
                                   time.monotonic() - decided_at)
    _export(ns, name, decision, measurements, evaluation is not None)
    _steer_probes(deps, spec, decision.status, ns, name, world_revisions, deleting,
                  released_adapter(seen, decision.status.stable_revision,
                                   decision.status.canary_revision))
    if deleting and decision.deletion_hold > 0:
        raise DeletionHeld(decision.deletion_hold, sorted(
            rev for rev in decision.status.old_revisions if rev in world_revisions))
    requeue = IDLE_SECONDS if decision.requeue_after is None else decision.requeue_after
    if seen is not None and not deleting:
        requeue = min(requeue, await _move_adapter_pods(deps, body, seen, decision, ns, name))
    # 0 is a real answer ("look again now": e.g. measure right after a weight change).
    return requeue


@asynccontextmanager
async def outside_slot(deps: Deps) -> AsyncIterator[None]:
    """Give the reconcile slot back while waiting on a tenant's Prometheus or model servers:
    their answers can take up to the tenant's timeout, and a slot held meanwhile would delay
    other namespaces' reconciles (a rollback among them).  The slot is taken again before the
    API server is written to."""
    if deps.slots is None:
        yield
        return
    deps.slots.release()
    try:
        yield
    finally:
        await deps.slots.acquire()


def _router(deps: Deps, body: dict[str, Any], traffic: TrafficSpec, port: int,
            revisions: dict[str, RevisionState]) -> TrafficRouter:
    meta = body["metadata"]
    ports = {rev: s.port for rev, s in revisions.items() if s.port is not None}
    return HTTPRouteRouter(deps.kube, meta["namespace"], meta["name"], meta["uid"],
                           traffic.gateway_api, port, ports,
                           HeaderRouting.of(traffic, meta["name"]))


async def _route(router: TrafficRouter, deleting: bool) -> RouteState | None:
    """The route's weights and the gateway's view of it; while deleting, a user's route that is
    already gone reads as no route (nothing to return to stable), never as an error that holds
    the finalizer."""
    try:
        return await router.observe()
    except RouteMissing:
        if deleting:
            return None
        raise


async def _traffic_to_stable(deps: Deps, body: dict[str, Any], status: InferenceRolloutStatus,
                             deleting: bool) -> None:
    """Move all traffic to stable when the spec cannot be trusted (it no longer parses, or a
    reconcile failed unexpectedly).  Only the traffic section of the spec is read; without it
    the route cannot be found and is left alone (logged)."""
    if status.stable_revision is None:
        return
    meta = body["metadata"]
    try:
        traffic = TrafficSpec.model_validate((body.get("spec") or {}).get("traffic"))
    except ValidationError as e:
        log.warning("%s/%s: spec.traffic does not parse, the route is left as it is: %s",
                    meta["namespace"], meta["name"], e)
        return
    revisions = Revisions(deps.kube, meta["namespace"], meta["name"], meta["uid"],
                          traffic.gateway_api)
    observed = await revisions.observe()
    # The router's fallback port is used only for a stable that has neither a Service nor a
    # backendRef in the route (get_weights learns the route's ports first).
    stable_port = observed.get(status.stable_revision, RevisionState(0, 0, 0)).port
    router = _router(deps, body, traffic, stable_port or DEFAULT_SERVING_PORT, observed)
    route = await _route(router, deleting=True)
    write = validation.traffic_to_stable(status, None if route is None else route.weights,
                                         deleting,
                                         NO_HEADER_ROUTES if route is None else route.header_routes)
    if write is not None:
        await router.set_weights(write.stable_revision, write.canary_revision,
                                 write.canary_weight, write.header_routes)


async def _refuse_status(deps: Deps, body: dict[str, Any], error: ValidationError,
                         generation: int) -> None:
    """A status that does not parse is acted on by nothing: only ``Valid=False`` naming the
    field is written (core/validation.py, ``unreadable_status_patch``)."""
    raw = body.get("status") or {}
    found = validation.describe_validation_error(error, root="status")
    patch = validation.unreadable_status_patch(raw, found, generation, deps.now())
    if all(raw.get(k) == v for k, v in patch.items()):
        return
    log.warning("%s/%s: status not read: %s", body["metadata"]["namespace"],
                body["metadata"]["name"], "; ".join(found))
    path = rollout_path(body["metadata"]["namespace"], body["metadata"]["name"])
    with contextlib.suppress(KubeError):  # a conflict or a deletion: the next reconcile sees it
        await deps.kube.merge_patch(path.sub("status"), {
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "status": patch})


async def fail_safe(deps: Deps, body: dict[str, Any], error: BaseException) -> bool:
    """After an unexpected exception in a reconcile: record ``ReconcileFailed`` and roll a
    release in flight back (status first, then the route), so a canary the operator cannot
    watch keeps no traffic and ``abort`` is never needed to get there.  True when traffic is
    on stable afterwards (or was never elsewhere)."""
    meta = body["metadata"]
    what = f"{type(error).__name__}: {error}"[:300]

    async def record_and_move(_deps: Deps, current: dict[str, Any]) -> None:
        cmeta = current["metadata"]
        try:
            status = InferenceRolloutStatus.parse(current.get("status"))
        except ValidationError:
            return  # nothing the status names is acted on (_refuse_status says why)
        new = validation.failed_status(status, what, int(cmeta.get("generation", 0)), deps.now())
        await write_status(deps, current, status, new)
        deps.notify(current, status, Decision((), new, None, new.abort_reason
                                              if new.aborted and not status.aborted else None))
        await _traffic_to_stable(deps, current, status, bool(cmeta.get("deletionTimestamp")))

    try:
        await fenced(deps, body, record_and_move, gone=None)
    except Exception as e:  # the fallback must never raise
        log.error("%s/%s: could not return traffic to stable after %s: %s", meta.get("namespace"),
                  meta.get("name"), what, e)
        return False
    return True


class DeletionHeld(Exception):
    """The deleted rollout must stay ``seconds`` more: a revision that left the route is still
    draining (the gateway may send to it until then), and collecting it would fail those
    requests.  Not an error: the finalizer is retried after ``seconds``."""

    def __init__(self, seconds: float, draining: list[str]) -> None:
        # The wait, not the revisions' due times: the core caps it (DELETION_DRAIN_LIMIT_SECONDS).
        super().__init__(f"revisions {', '.join(draining)} drain for {seconds:.0f}s more "
                         "before the rollout goes")
        self.seconds = seconds


async def release_before_deletion(deps: Deps, body: dict[str, Any]) -> None:
    """The delete handler's work (also the deletion watchdog's): all traffic to stable, and with
    a user-owned route the stable's objects orphaned.  Raises when it must be retried:
    :class:`DeletionHeld` while a revision drains."""
    meta = body["metadata"]
    try:
        await reconcile(deps, body)
    except EXPECTED_ERRORS as e:
        if NAMESPACE_TERMINATING in str(e):
            # The whole namespace is going: its route and backends go with it, and the API
            # server refuses every write there.  Holding the finalizer would only block it.
            log.info("%s/%s: namespace terminating; nothing left to protect", meta["namespace"],
                     meta["name"])
            return
        raise


def _bad_news_at(deps: Deps, ns: str, name: str,
                 status: InferenceRolloutStatus) -> datetime | None:
    found = deps.probing(ns, name, status.canary_revision)
    if found is None or not found.bad_at:
        return None
    return datetime.fromtimestamp(found.bad_at, UTC)


async def _adapter_world(deps: Deps, spec: InferenceRolloutSpec,
                         status: InferenceRolloutStatus, spec_template: str, ns: str, name: str,
                         revisions: Revisions) -> AdapterWorld | None:
    """The observe step of a rollout with adapters (None: a rollout without).  A rollout that
    served adapters stays one when they are removed (its Services are its serving versions';
    the next release unloads them), so pods listed in ``status.adapterPods`` count too."""
    if not deps.adapter_releases or not (spec.adapters or status.adapter_pods):
        return None
    wanted = {a.name: a.source for a in spec.adapters or ()}
    return await observe_adapters(revisions, deps.adapter_pods(ns), name, spec_template,
                                  wanted, status.stable_revision, status.canary_revision)


async def _move_adapter_pods(deps: Deps, body: dict[str, Any], seen: AdapterWorld,
                             decision: Decision, ns: str, name: str) -> float:
    """One round of pod moves toward what the decision asked; seconds until the next look.
    A refused move is a Warning Event too (``AdapterMoveFailed``; the same one again is
    counted on it): a step that waits on it says why where users look."""
    st = decision.status
    moved = await move_pods(deps.adapter_pods(ns), seen, st.stable_revision,
                            st.canary_revision, decision.actions, deps.now(),
                            deps.adapter_drain_seconds, deps.adapter_drain_max_seconds)
    for why in moved.held:
        log.warning("%s/%s: %s", ns, name, why)
    for pod in unread(seen):
        log.warning("%s/%s: pod %s serves but its /v1/models could not be read: it is left "
                    "as it is until it answers", ns, name, pod)
    for pod, why in blocked(moved).items():
        log.warning("%s/%s: pod %s: %s (retried)", ns, name, pod, why)
        with contextlib.suppress(KubeError):  # an Event lost is logged above already
            await deps.post_event(body, RecordEvent("Warning", r.ADAPTER_MOVE_FAILED,
                                                    f"pod {pod}: {why}"[:1000]))
    if moved.moved:
        return ADAPTER_MOVE_POLL_SECONDS
    return IDLE_SECONDS if moved.wake_in is None else moved.wake_in


def _probe_counts(deps: Deps, ns: str, name: str, canary: str | None) -> ProbeCounts | None:
    found = deps.probing(ns, name, canary)
    if found is None:
        return None
    return ProbeCounts(found.target.canary, found.sent, round(found.seconds, 3),
                       found.canary_answered)


def _steer_probes(deps: Deps, spec: InferenceRolloutSpec, status: InferenceRolloutStatus,
                  ns: str, name: str, revisions: dict[str, RevisionState],
                  deleting: bool, adapter: str | None = None) -> None:
    """Probe the canary and the stable from the canary's first Ready pod until the release
    ends (promoted, rolled back, replaced) or the rollout goes; otherwise no probes.
    ``adapter``: an adapter release's model name, which the probes ask for on both sides."""
    probes, canary, stable = spec.analysis.probes, status.canary_revision, status.stable_revision
    seen = revisions.get(canary or "")
    if (probes is None or deleting or canary is None or stable is None or status.aborted
            or seen is None or seen.ready == 0):
        if deps.probers is not None:
            deps.probers.stop(ns, name)
        return
    stable_seen = revisions.get(stable)
    stable_port = (stable_seen.port if stable_seen and stable_seen.port
                   else spec.template.serving_port())
    try:
        model = adapter or served_model(spec.template)
    except ValueError:
        return  # the template names no model: the lints say so
    ttft = next((m.max for m in spec.analysis.effective_metrics
                 if m.template == "probe-ttft-p99" and m.max is not None), None)
    deps.probes().ensure(ProbeTarget(
        ns, name, canary, service_url(name, canary, ns, seen.port or spec.template.serving_port()),
        service_url(name, stable, ns, stable_port), model, probes, ttft))


async def _measure(deps: Deps, spec: InferenceRolloutSpec, status: InferenceRolloutStatus,
                   ns: str, name: str,
                   pods: dict[str, tuple[str, ...]] | None = None) -> dict[str, Measurement]:
    """``pods``: a rollout with adapters, each serving version's pods by name."""
    assert status.canary_revision is not None
    metrics = [m for m in spec.analysis.effective_metrics if m.template not in PROBE_TEMPLATES]
    out = _measure_probes(deps, spec, status, ns, name)
    if metrics:
        out.update(await _measure_prometheus(deps, spec, status, ns, name, metrics, pods))
    return out


def _measure_probes(deps: Deps, spec: InferenceRolloutSpec, status: InferenceRolloutStatus,
                    ns: str, name: str) -> dict[str, Measurement]:
    """The probes' metrics, from the samples this process holds (``evaluation/probes.py``)."""
    wanted = [m for m in spec.analysis.effective_metrics if m.template in PROBE_TEMPLATES]
    if not wanted:
        return {}
    found = deps.probing(ns, name, status.canary_revision)
    held_from = from_iso(status.step_started_at)
    since = (held_from.timestamp() if held_from is not None
             and spec.analysis.verdicts == "Sequential" else None)
    now = time.time()
    out = {}
    for m in wanted:
        window = m.window_seconds or spec.analysis.interval_seconds
        min_samples = spec.analysis.min_samples if m.min_samples is None else m.min_samples
        out[m.name] = (probe_measurement(m, found.samples, since, window, now, min_samples)
                       if found is not None else not_probing())
    return out


async def _measure_prometheus(deps: Deps, spec: InferenceRolloutSpec,
                              status: InferenceRolloutStatus, ns: str, name: str,
                              metrics: list[MetricSpec],
                              pods: dict[str, tuple[str, ...]] | None) -> dict[str, Measurement]:
    assert status.canary_revision is not None and spec.analysis.prometheus is not None
    try:
        source = await deps.source_for(spec, ns)
    except KubeError as e:
        return {m.name: Measurement(None, error=MeasurementError.UNREACHABLE,
                                    detail=f"Prometheus token: {e.message}") for m in metrics}
    # The Sequential rule counts from when the step's weight was reached (until then the
    # canary carries the previous step's weight: its last window is measured, as by Window).
    held_from = from_iso(status.step_started_at)
    started = held_from if spec.analysis.verdicts == "Sequential" else None
    return await measure(
        source, ns, name, status.canary_revision, status.stable_revision, metrics,
        spec.analysis.interval_seconds, spec.analysis.min_samples,
        gateway_source=unconfined(source),
        scrape_interval_s=spec.analysis.prometheus.scrape_interval_seconds,
        since=None if started is None else started.timestamp(),
        # The weight in force: set, and accepted by the gateway (the hold has started).
        weight=status.canary_weight if held_from is not None else None,
        weight_since=None if held_from is None else held_from.timestamp(), pods=pods)


async def _evaluate(deps: Deps, spec: InferenceRolloutSpec, status: InferenceRolloutStatus,
                    ns: str, name: str, world_revisions: dict[str, RevisionState],
                    adapter: str | None = None) -> EvaluationOutcome:
    """Run the business evaluation set against canary and stable; any problem is an error
    outcome (retried by the gate, never a pass).  ``adapter``: an adapter release's model
    name, which the cases are sent to on both sides (the base model did not change)."""
    ev, canary, stable = spec.evaluation, status.canary_revision, status.stable_revision
    assert ev is not None and canary is not None and stable is not None
    ref = ev.config_map_ref
    text = await configmap_text(deps.kube, ns, ref.name, ref.key)
    if isinstance(text, Missing):
        return EvaluationOutcome(canary, error=str(text))
    try:
        # off the event loop: checking a large case list's patterns takes time, and every
        # tenant's reconciles wait on the loop
        cases = await asyncio.to_thread(parse_cases, text, ev.sample_size)
        model = adapter or served_model(spec.template)
        stable_state = world_revisions.get(stable)
        stable_port = (stable_state.port if stable_state and stable_state.port
                       else spec.template.serving_port())
        canary_port = spec.template.serving_port()
    except CasesError as e:
        return EvaluationOutcome(canary, error=f"ConfigMap {ref.name} key {ref.key}: {e}")
    except ValueError as e:
        return EvaluationOutcome(canary, error=str(e))
    log.info("%s/%s: evaluating canary %s against stable %s (%d cases)", ns, name, canary,
             stable, len(cases))
    result = await run_evaluation(
        cases, service_url(name, canary, ns, canary_port), service_url(name, stable, ns,
                                                                       stable_port),
        model, concurrency=ev.concurrency, timeout=ev.timeout_seconds,
        proxy=deps.service_proxy, namespace=ns)
    return EvaluationOutcome(canary, result.canary_score, result.stable_score, result.cases,
                             result.error, result.detail)


async def apply_actions(deps: Deps, body: dict[str, Any], decision: Decision,
                        revisions: Revisions | VersionRevisions, router: TrafficRouter,
                        template: PodTemplate, template_revision: str) -> None:
    """Carry out the core's actions in order.  A failed write stops the rest: later actions may
    rely on it (no scale-down before traffic has moved), and the next reconcile retries.
    Events are not among them: :func:`post_events` posts them once the status is written."""
    action: Action
    for action in decision.actions:
        if isinstance(action, SetWeights):
            await router.set_weights(action.stable_revision, action.canary_revision,
                                     action.canary_weight, action.header_routes)
        elif isinstance(action, EnsureRevision):
            await revisions.ensure(action.revision, action.replicas, template, template_revision)
        elif isinstance(action, DeleteRevision):
            await revisions.delete(action.revision)
        elif isinstance(action, OrphanRevision):
            await revisions.orphan(action.revision)


async def post_events(deps: Deps, body: dict[str, Any], decision: Decision) -> None:
    """The decision's Events, posted only once its status write succeeded (issue 33): a
    decision whose write met a newer object (``fenced`` decides again) never happened, and its
    Events would claim what nobody did, then appear again from the next decision. A crash
    between the write and this loses the Events, never doubles them: the status is the record."""
    for action in decision.actions:
        if isinstance(action, RecordEvent):
            await deps.post_event(body, action)


#: Conflicting status writes in a row before a reconcile gives up (retried after the error
#: backoff): each conflict means someone else wrote, and the next attempt decides anew.
STATUS_WRITE_ATTEMPTS = 5

T = TypeVar("T")


class StatusConflict(KubeError):
    """The status write met a newer object than the one the decision was made from."""


async def fenced(deps: Deps, body: dict[str, Any],
                 attempt: Callable[[Deps, dict[str, Any]], Awaitable[T]], gone: T) -> T:
    """Run ``attempt`` (read the body, decide, act, write the status); after a
    :class:`StatusConflict`, read the object again and run it again from what the server holds.

    This is what makes two writers safe (two operator replicas for a moment, or the CLI): the
    status a decision is written over is always the one it was made from.  Actions the stale
    attempt applied before its write are corrected by the next attempt, exactly as after a crash
    between the actions and the status write (docs/architecture.md).  ``gone``: the answer when
    the object was deleted meanwhile."""
    path = rollout_path(body["metadata"]["namespace"], body["metadata"]["name"])
    current = body
    for _attempt in range(STATUS_WRITE_ATTEMPTS):
        try:
            return await attempt(deps, current)
        except StatusConflict:
            operator_metrics.REGISTRY.inc("inference_rollout_status_conflicts_total")
            fresh = await deps.kube.get_or_none(path)
            if fresh is None:
                return gone
            log.info("%s: status changed meanwhile (resourceVersion %s -> %s); deciding again",
                     path, current["metadata"].get("resourceVersion"),
                     fresh["metadata"].get("resourceVersion"))
            current = fresh
    raise KubeError(409, "PATCH", path.sub("status"),
                    f"status write still conflicting after {STATUS_WRITE_ATTEMPTS} decisions")


async def write_status(deps: Deps, body: dict[str, Any], old: InferenceRolloutStatus,
                       new: InferenceRolloutStatus) -> None:
    """Patch the status subresource if anything changed, guarded by the resourceVersion the
    decision was made from.  A conflict raises :class:`StatusConflict` (never a retry with the
    same decision: see :func:`fenced`); a rollout deleted meanwhile is not an error."""
    old_body, new_body = old.to_body(), new.to_body()
    if old_body == new_body:
        return
    meta = body["metadata"]
    object_path = rollout_path(meta["namespace"], meta["name"])
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"]},
             "status": with_deletions(body.get("status") or old_body, new_body)}
    try:
        updated = await deps.kube.merge_patch(object_path.sub("status"), patch)
    except KubeError as e:
        if e.status == 404:
            return  # deleted meanwhile
        if e.status == 409:
            raise StatusConflict(e.status, e.method, e.path, e.message) from e
        raise
    meta["resourceVersion"] = updated["metadata"]["resourceVersion"]
    body["status"] = updated.get("status", new_body)


def with_deletions(stored: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that turns ``stored`` into ``new``: ``new`` itself, plus an explicit
    null for every key (at any depth of nested objects) that ``stored`` has and ``new`` lacks.

    A merge patch only deletes what it names as null; without these, a reset such as the
    analysis results of a new release (``analysis: {}``) would leave the old verdicts in place,
    and a stale Fail would hold the next release at 0% (RFC 7386).
    """
    out: dict[str, Any] = dict(new)
    for key, old_value in stored.items():
        if key not in new:
            out[key] = None
        elif isinstance(old_value, dict) and isinstance(new[key], dict):
            out[key] = with_deletions(old_value, new[key])
    return out


def _export(ns: str, name: str, decision: Decision,
            measurements: dict[str, Measurement] | None, evaluated: bool = False) -> None:
    reg, st = operator_metrics.REGISTRY, decision.status
    reg.forget(namespace=ns, name=name)
    reg.set("inference_rollout_info", 1, namespace=ns, name=name, phase=st.phase or "Unknown")
    reg.set("inference_rollout_step", -1 if st.current_step is None else st.current_step + 1,
            namespace=ns, name=name)
    reg.set("inference_rollout_canary_weight", st.canary_weight, namespace=ns, name=name)
    ev = st.evaluation
    if ev is not None:
        if evaluated:  # this reconcile ran the set (else the result is an earlier run's)
            reg.inc("inference_rollout_evaluation_runs_total", namespace=ns, name=name,
                    verdict=ev.verdict)
        for role, score in (("canary", ev.canary_score), ("stable", ev.stable_score)):
            if score is not None:
                reg.set("inference_rollout_evaluation_score", score, namespace=ns, name=name,
                        revision=ev.revision, role=role)
    if measurements:
        for metric, result in st.analysis.items():
            if metric in measurements and result.verdict:
                reg.inc("inference_rollout_analysis_verdicts_total", namespace=ns, name=name,
                        metric=metric, verdict=result.verdict)
    for metric, result in st.analysis.items():  # what the verdicts saw (the release report)
        for role, value in (("canary", result.value), ("stable", result.stable_value)):
            if value is not None:
                reg.set("inference_rollout_analysis_value", value, namespace=ns, name=name,
                        metric=metric, role=role)
    if decision.rolled_back:
        reg.inc("inference_rollout_rollbacks_total", namespace=ns, name=name,
                reason=decision.rolled_back)
    cost = st.release_cost
    if cost is not None:
        for quantity, amount in (("pod_seconds", cost.pod_seconds),
                                 ("gpu_seconds", cost.gpu_seconds),
                                 ("pods_started", cost.pods_started),
                                 ("canary_requests", cost.canary_requests),
                                 ("rolled_back_requests", cost.rolled_back_requests)):
            reg.set("inference_rollout_release_cost", amount, namespace=ns, name=name,
                    revision=cost.revision, quantity=quantity)


__all__ = ["EXPECTED_ERRORS", "Deps", "StatusConflict", "fail_safe", "fenced", "reconcile",
           "release_before_deletion"]
