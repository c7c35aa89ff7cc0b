"""The reconciler end to end against an in-memory API server (tests/unit/memory_kube.py): what
it writes, in which order, and what it leaves alone -- the first release, a canary rolled back
on a failing metric, a spec that no longer parses, the fail-safe after a bug, deletion in a
terminating namespace, fenced writes, the Prometheus source per tenant, and the evaluation's
refusals.  The pure core decides; these tests check that its decisions reach the API."""

from __future__ import annotations

import asyncio
import base64
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.unit.coresim import manifest_spec, with_model
from tests.unit.fakes import PrometheusCounts as Source
from tests.unit.fakes import no_events
from tests.unit.memory_kube import MemoryKube, rollout_on_route

from inference_rollout import operator_metrics
from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.types import Decision, RecordEvent
from inference_rollout.kube import KubeError
from inference_rollout.metrics.source import BadQuery, PrometheusSource, Unreachable
from inference_rollout.metrics.tenancy import NamespaceConfined
from inference_rollout.paths import ns_path, rollout_path
from inference_rollout.reconciler import (
    NAMESPACE_TERMINATING,
    DeletionHeld,
    Deps,
    StatusConflict,
    _evaluate,
    fail_safe,
    fenced,
    reconcile,
    release_before_deletion,
    with_deletions,
    write_status,
)

NS, NAME, PROM = "prod", "chat", "http://prom:9090"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ROLLOUT = rollout_path(NS, NAME)
ROUTE = ns_path("gateway.networking.k8s.io", "v1", NS, "httproutes", NAME)
DEPLOYMENTS = ns_path("apps", "v1", NS, "deployments")
SERVICES = ns_path("", "v1", NS, "services")


class Notices:
    def __init__(self) -> None:
        self.offered: list[tuple[str, str, str | None, Any]] = []

    def offer(self, namespace: str, name: str, secret: str | None, events: Any,
              notices: Any) -> None:
        self.offered.append((namespace, name, secret, [n.reason for n in notices]))


class Cluster:
    """A rollout on its user-owned HTTPRoute, a clock, and what the reconciler posted."""

    def __init__(self, spec: dict[str, Any] | None = None,
                 status: dict[str, Any] | None = None) -> None:
        self.kube = rollout_on_route(NS, NAME, spec or manifest_spec(), status)
        self.events: list[RecordEvent] = []
        self.now = T0
        self.notices = Notices()
        self.source = Source(errors=0.0)

        async def post(_body: dict[str, Any], event: RecordEvent) -> None:
            self.events.append(event)

        # Tenancy settings explicit (whatever the defaults): Prometheus allowed, unconfined.
        self.deps = Deps(kube=self.kube, post_event=post, now=lambda: self.now,
                         prometheus_allow=(PROM,), confine_queries=False,
                         notifier=self.notices)  # type: ignore[arg-type]
        self.deps.sources[(PROM, 5.0, None)] = self.source  # type: ignore[assignment]

    @property
    def body(self) -> dict[str, Any]:
        return copy.deepcopy(self.kube.objects[ROLLOUT])

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.kube.objects[ROLLOUT].get("status") or {})

    def weights(self) -> dict[str, int]:
        refs = self.kube.objects[ROUTE]["spec"]["rules"][0]["backendRefs"]
        return {ref["name"]: ref["weight"] for ref in refs}

    def reconcile(self, seconds: float = 15) -> float:
        self.now += timedelta(seconds=seconds)
        self.kube.calls.clear()
        delay = asyncio.run(reconcile(self.deps, self.body))
        for path, obj in self.kube.objects.items():  # the Deployment controller: pods Ready
            if path.startswith(DEPLOYMENTS + "/"):
                n = obj["spec"]["replicas"]
                obj["status"] = {"readyReplicas": n, "availableReplicas": n}
        return delay

    def new_template(self, model: str) -> None:
        obj = self.kube.objects[ROLLOUT]
        obj["spec"] = with_model(obj["spec"], model)
        obj["metadata"]["generation"] += 1


def healthy() -> Cluster:
    c = Cluster()
    c.reconcile()
    c.reconcile()
    assert c.status["phase"] == "Healthy"
    return c


def test_the_first_release_creates_service_before_deployment_and_gets_all_traffic() -> None:
    c = Cluster()
    delay = c.reconcile()
    stable = c.status["stableRevision"]
    creates = [path for method, path, _ in c.kube.writes("POST")]
    assert creates == [SERVICES, DEPLOYMENTS]  # a crash in between leaves no Service-less pods
    deployment = c.kube.objects[f"{DEPLOYMENTS}/{NAME}-{stable}"]
    assert deployment["spec"]["replicas"] == 4
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert c.weights() == {f"{NAME}-{stable}": 100}
    # the user's match is kept: only backendRefs are rewritten
    assert c.kube.objects[ROUTE]["spec"]["rules"][0]["matches"] == [{"path": {"value": "/"}}]
    assert [e.reason for e in c.events] == ["FirstRelease"]
    assert c.status["phase"] == "Progressing" and delay == 2.0
    c.reconcile()
    assert c.status["phase"] == "Healthy" and c.status["observedGeneration"] == 1
    c.kube.calls.clear()
    c.reconcile()
    assert c.kube.writes() == []  # nothing changed: nothing written


def test_a_failing_canary_is_rolled_back_and_the_rollback_is_recorded_before_traffic_moves(
) -> None:
    c = healthy()
    stable = c.status["stableRevision"]
    c.new_template("m2")
    c.reconcile()  # the canary's Deployment
    canary = c.status["canaryRevision"]
    assert canary and canary != stable and f"{DEPLOYMENTS}/{NAME}-{canary}" in c.kube.objects
    c.reconcile()  # its pods are Ready: the first step's weight
    assert c.weights() == {f"{NAME}-{stable}": 95, f"{NAME}-{canary}": 5}
    c.source.errors = 500.0  # half the canary's requests fail
    c.reconcile()
    st = c.status
    assert st["aborted"] is True and st["abortReason"] == "AnalysisFailed"
    assert st["phase"] == "Degraded" and st["canaryWeight"] == 0
    assert st["analysis"]["errors"]["verdict"] == "Fail"
    assert c.weights() == {f"{NAME}-{stable}": 100, f"{NAME}-{canary}": 0}
    writes = [path for _, path, _ in c.kube.writes("PATCH")]
    assert writes.index(ROLLOUT + "/status") < writes.index(ROUTE)
    assert "AnalysisFailed" in [e.reason for e in c.events]
    assert c.source.queries > 0
    assert any("AnalysisFailed" in reasons for *_, reasons in c.notices.offered)
    metrics = operator_metrics.REGISTRY.render()
    assert (f'inference_rollout_rollbacks_total{{name="{NAME}",namespace="{NS}",'
            f'reason="AnalysisFailed"}}') in metrics
    assert (f'inference_rollout_info{{name="{NAME}",namespace="{NS}",phase="Degraded"}} 1.0'
            in metrics)


def test_a_spec_that_no_longer_parses_names_the_field_and_returns_traffic_to_stable() -> None:
    c = healthy()
    stable = c.status["stableRevision"]
    c.new_template("m2")
    c.reconcile()
    c.reconcile()
    canary = c.status["canaryRevision"]
    assert c.weights()[f"{NAME}-{canary}"] == 5
    c.kube.objects[ROLLOUT]["spec"]["replicas"] = "many"
    c.kube.objects[ROLLOUT]["metadata"]["generation"] += 1
    assert c.reconcile() == 30.0
    valid = next(x for x in c.status["conditions"] if x["type"] == "Valid")
    assert valid["status"] == "False" and "spec.replicas" in valid["message"]
    assert c.weights() == {f"{NAME}-{stable}": 100, f"{NAME}-{canary}": 0}


def canary_at(weight: int) -> Cluster:
    c = healthy()
    c.new_template("m2")
    c.reconcile()
    c.reconcile()
    assert c.status["canaryWeight"] == weight
    return c


def test_fail_safe_records_the_error_and_moves_traffic_to_stable() -> None:
    c = canary_at(5)
    stable = c.status["stableRevision"]
    ok = asyncio.run(fail_safe(c.deps, c.body, RuntimeError("boom")))
    assert ok is True
    st = c.status
    assert st["aborted"] is True and st["abortReason"] == "ReconcileFailed"
    assert "RuntimeError: boom" in st["message"]
    assert c.weights()[f"{NAME}-{stable}"] == 100
    assert any("ReconcileFailed" in reasons for *_, reasons in c.notices.offered)


def test_fail_safe_never_raises_and_says_when_traffic_could_not_be_moved() -> None:
    c = canary_at(5)
    c.kube.fail[("PATCH", ROUTE)] = KubeError(500, "PATCH", ROUTE, "etcd is down")
    assert asyncio.run(fail_safe(c.deps, c.body, RuntimeError("boom"))) is False


def test_fail_safe_leaves_an_unreadable_status_alone() -> None:
    c = Cluster(status={"stableRevision": "../../x", "canaryWeight": 20})
    assert asyncio.run(fail_safe(c.deps, c.body, RuntimeError("boom"))) is True
    assert c.kube.writes() == []


def test_deletion_in_a_terminating_namespace_holds_nothing_other_errors_are_retried() -> None:
    c = healthy()
    c.kube.fail[("GET", DEPLOYMENTS)] = KubeError(
        403, "GET", DEPLOYMENTS, f"namespace {NS} is forbidden: {NAMESPACE_TERMINATING}")
    asyncio.run(release_before_deletion(c.deps, c.body))  # returns: the finalizer may go
    c.kube.fail[("GET", DEPLOYMENTS)] = KubeError(500, "GET", DEPLOYMENTS, "etcd is down")
    with pytest.raises(KubeError, match="etcd is down"):
        asyncio.run(release_before_deletion(c.deps, c.body))


def test_deleting_moves_traffic_to_stable_and_a_missing_route_is_not_an_error() -> None:
    c = canary_at(5)
    stable, canary = c.status["stableRevision"], c.status["canaryRevision"]
    c.kube.objects[ROLLOUT]["metadata"]["deletionTimestamp"] = "2026-12-01T13:00:00Z"
    # The canary left the route; the rollout (so its pods) stays while the gateway follows.
    with pytest.raises(DeletionHeld, match=f"revisions {canary} drain for 30s more") as held:
        asyncio.run(release_before_deletion(c.deps, c.body))
    assert held.value.seconds == 30
    assert c.weights()[f"{NAME}-{stable}"] == 100
    assert c.status["oldRevisions"] == {canary: "2026-12-01T12:01:30.000Z"}
    assert f"{DEPLOYMENTS}/{NAME}-{canary}" in c.kube.objects
    c.now += timedelta(seconds=30)
    asyncio.run(release_before_deletion(c.deps, c.body))  # drained: the finalizer may go
    assert c.weights()[f"{NAME}-{stable}"] == 100
    del c.kube.objects[ROUTE]
    asyncio.run(release_before_deletion(c.deps, c.body))  # nothing to return: no error


def test_a_rollout_deleted_during_a_conflict_answers_gone() -> None:
    kube = MemoryKube()
    deps = Deps(kube=kube, post_event=no_events)
    body = {"metadata": {"namespace": NS, "name": NAME, "resourceVersion": "1"}}

    async def conflicting(_d: Deps, _b: dict[str, Any]) -> str:
        raise StatusConflict(409, "PATCH", "p", "conflict")

    assert asyncio.run(fenced(deps, body, conflicting, gone="gone")) == "gone"
    kube.put(ROLLOUT, {"metadata": {"namespace": NS, "name": NAME}})
    with pytest.raises(KubeError, match="still conflicting after 5 decisions") as err:
        asyncio.run(fenced(deps, body, conflicting, gone="gone"))
    assert err.value.status == 409


def test_write_status_ignores_a_deleted_rollout_and_raises_other_refusals() -> None:
    kube = MemoryKube()
    deps = Deps(kube=kube, post_event=no_events)
    body = {"metadata": {"namespace": NS, "name": NAME, "resourceVersion": "1"}}
    new = InferenceRolloutStatus(phase="Healthy")
    asyncio.run(write_status(deps, body, InferenceRolloutStatus(), new))  # 404: no error
    kube.fail[("PATCH", ROLLOUT + "/status")] = KubeError(403, "PATCH", ROLLOUT, "forbidden")
    with pytest.raises(KubeError, match="forbidden"):
        asyncio.run(write_status(deps, body, InferenceRolloutStatus(), new))


def test_with_deletions_nulls_what_the_new_status_dropped_at_any_depth() -> None:
    stored = {"a": 1, "analysis": {"errors": {"verdict": "Fail", "value": 0.3}}, "gone": {}}
    new = {"a": 2, "analysis": {"errors": {"verdict": "Pass"}}}
    assert with_deletions(stored, new) == {
        "a": 2, "analysis": {"errors": {"verdict": "Pass", "value": None}}, "gone": None}


# --- the Prometheus source of a tenant -------------------------------------------------------

def spec_with(prometheus: dict[str, Any]) -> InferenceRolloutSpec:
    return InferenceRolloutSpec.parse(manifest_spec(analysis={
        "interval": "10s", "prometheus": {"address": PROM, **prometheus},
        "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]}))


def secret(token: bytes) -> dict[str, Any]:
    return {"metadata": {"name": "prom-token"},
            "data": {"token": base64.b64encode(token).decode()}}


TOKEN_REF = {"bearerTokenSecretRef": {"name": "prom-token", "key": "token"}}
SECRET = ns_path("", "v1", NS, "secrets", "prom-token")


def source_error(deps: Deps, spec: InferenceRolloutSpec) -> str:
    async def go() -> str:
        source = await deps.source_for(spec, NS)
        try:
            await source.query("up")
        except (Unreachable, BadQuery) as e:
            return str(e)
        raise AssertionError("the query was sent")
    return asyncio.run(go())


def test_an_address_outside_the_allow_list_is_refused_before_the_token_is_read() -> None:
    kube = MemoryKube({SECRET: secret(b"s3cret")})
    deps = Deps(kube=kube, post_event=no_events,
                prometheus_allow=("http://allowed:9090",))
    message = source_error(deps, spec_with(TOKEN_REF))
    assert "http://prom:9090 is not allowed" in message
    assert kube.calls == []  # the Secret was never read


def test_a_missing_or_unusable_token_fails_the_metrics_and_never_quotes_the_token() -> None:
    deps = Deps(kube=MemoryKube(), post_event=no_events,
                prometheus_allow=(PROM,))
    assert "Prometheus token: Secret prom-token" in source_error(deps, spec_with(TOKEN_REF))
    deps = Deps(kube=MemoryKube({SECRET: secret(b"not a token\x01")}),
                post_event=no_events, prometheus_allow=(PROM,))
    message = source_error(deps, spec_with(TOKEN_REF))
    assert "key token is not a bearer token" in message and "\x01" not in message


def test_sources_are_reused_per_address_and_token_and_the_oldest_is_evicted() -> None:
    async def go() -> None:
        deps = Deps(kube=MemoryKube({SECRET: secret(b"abc.def")}),
                    post_event=no_events,
                    prometheus_allow=(PROM,), confine_queries=False, max_sources=1)
        first = await deps.source_for(spec_with(TOKEN_REF), NS)
        assert isinstance(first, PrometheusSource)
        assert await deps.source_for(spec_with(TOKEN_REF), NS) is first
        other = await deps.source_for(spec_with({"timeout": "7s"}), NS)
        assert other is not first and list(deps.sources.values()) == [other]
        assert len(deps._closing) == 1  # the evicted client is closed after its queries
        for task in deps._closing:
            task.cancel()
        deps.confine_queries = True
        assert isinstance(await deps.source_for(spec_with({}), NS), NamespaceConfined)
        for source in deps.sources.values():
            await source.aclose()

    asyncio.run(go())


# --- the evaluation's refusals ---------------------------------------------------------------

EVAL_SPEC = manifest_spec(evaluation={"configMapRef": {"name": "cases", "key": "cases.jsonl"}})
CONFIGMAP = ns_path("", "v1", NS, "configmaps", "cases")


def evaluate(kube: MemoryKube) -> Any:
    spec = InferenceRolloutSpec.parse(EVAL_SPEC)
    status = InferenceRolloutStatus(stable_revision="5151515151", canary_revision="c1c1c1c1c1")
    deps = Deps(kube=kube, post_event=no_events)
    return asyncio.run(_evaluate(deps, spec, status, NS, NAME, {}))


def test_an_evaluation_without_its_configmap_is_an_error_outcome_naming_it() -> None:
    outcome = evaluate(MemoryKube())
    assert outcome.revision == "c1c1c1c1c1" and outcome.canary_score is None
    assert outcome.error is not None and "ConfigMap cases" in outcome.error
    outcome = evaluate(MemoryKube({CONFIGMAP: {"metadata": {"name": "cases"}, "data": {}}}))
    assert "has no key 'cases.jsonl'" in outcome.error


def test_an_evaluation_set_that_does_not_parse_names_the_configmap_key() -> None:
    outcome = evaluate(MemoryKube({CONFIGMAP: {"metadata": {"name": "cases"},
                                               "data": {"cases.jsonl": "{not json\n"}}}))
    assert outcome.error.startswith("ConfigMap cases key cases.jsonl: ")


def test_lint_findings_are_computed_once_per_generation() -> None:
    deps = Deps(kube=MemoryKube(), post_event=no_events)
    body = {"metadata": {"uid": "u1", "generation": 1, "name": NAME, "namespace": NS},
            "spec": manifest_spec()}
    first = deps.lint_errors(body, None)
    assert deps.lint_errors(body, None) is first
    body["metadata"]["generation"] = 2
    deps.lint_errors(body, None)
    assert len(deps.lint_cache) == 2


def test_notify_without_a_notifier_or_with_a_broken_spec_still_offers_safely() -> None:
    deps = Deps(kube=MemoryKube(), post_event=no_events)
    decision = Decision((), InferenceRolloutStatus(), None, None)
    body = {"metadata": {"namespace": NS, "name": NAME}, "spec": {"notifications": 7}}
    deps.notify(body, InferenceRolloutStatus(), decision)  # no notifier: nothing to do
    notices = Notices()
    deps.notifier = notices  # type: ignore[assignment]
    deps.notify(body, InferenceRolloutStatus(), decision)
    assert notices.offered == [(NS, NAME, None, [])]
