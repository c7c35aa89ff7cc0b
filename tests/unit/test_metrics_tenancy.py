"""Tenancy settings of the operator (metrics/tenancy.py, reconciler.Deps.source_for): the
Prometheus allow-list keeps a tenant's bearer token and queries away from addresses outside it,
queries are confined to the rollout's namespace, and the clients cache is bounded.

The Prometheus here is a real loopback HTTP server that records what reaches it; the API server is
a stand-in that serves one Secret and counts reads (what matters is whether it is read at all)."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest
from tests.unit.coresim import manifest_spec
from tests.unit.fakes import UnexpectedKube, no_events
from tests.unit.hostile_server import respond, serve

from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.types import MeasurementError
from inference_rollout.metrics.measure import measure
from inference_rollout.metrics.source import PrometheusSource
from inference_rollout.metrics.tenancy import address_allowed, check_allow_list
from inference_rollout.reconciler import Deps, _measure

VECTOR = {"status": "success",
          "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "0.001"]}]}}


@pytest.fixture
def prometheus() -> Iterator[tuple[str, list[bytes]]]:
    """A Prometheus stand-in on loopback; the list holds every request that reached it."""
    seen: list[bytes] = []
    with serve(respond(json.dumps(VECTOR).encode()), seen) as base:
        yield base, seen


def sent(raw: list[bytes]) -> list[dict[str, Any]]:
    """Each recorded request's query and Authorization header."""
    out = []
    for request in raw:
        head, _, body = request.partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
        out.append({"query": parse_qs(body.decode())["query"][0], "auth": auth})
    return out


class SecretStore(UnexpectedKube):
    """Serves the tenant's token Secret and counts reads of it."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        self.reads.append(path)
        return {"data": {"token": base64.b64encode(b"tenant-secret-token").decode()}}


def spec_for(address: str, query: str | None = None, timeout: str = "5s") -> InferenceRolloutSpec:
    metric = ({"name": "custom", "query": query, "max": 1} if query
              else {"name": "errors", "template": "error-rate", "max": 0.01})
    return InferenceRolloutSpec.parse(manifest_spec(analysis={
        "interval": "10s",
        "prometheus": {"address": address, "timeout": timeout,
                       "bearerTokenSecretRef": {"name": "prom-token", "key": "token"}},
        "metrics": [metric]}))


def run_measure(deps: Deps, spec: InferenceRolloutSpec, namespace: str = "team-a") -> Any:
    async def go() -> Any:
        source = await deps.source_for(spec, namespace)
        assert spec.analysis.prometheus is not None
        return await measure(source, namespace, "chat", "c1", "s1", spec.analysis.metrics, 10.0,
                             0, scrape_interval_s=1.0)
    return asyncio.run(go())


def test_with_the_opt_out_the_token_goes_where_the_rollout_says(
        prometheus: tuple[str, list[bytes]]) -> None:
    # What the allow-list exists for: any tenant can point the operator, with its token, anywhere.
    address, seen = prometheus
    deps = Deps(kube=SecretStore(), post_event=no_events, prometheus_allow_any=True)
    run_measure(deps, spec_for(address))
    assert seen and sent(seen)[0]["auth"] == "Bearer tenant-secret-token"


def test_by_default_no_address_is_allowed_and_the_error_names_both_settings(
        prometheus: tuple[str, list[bytes]]) -> None:
    """Secure by default (issue 29): a default install contacted any address a spec named."""
    address, seen = prometheus
    kube = SecretStore()
    m = run_measure(Deps(kube=kube, post_event=no_events), spec_for(address))["errors"]
    assert seen == [] and kube.reads == []  # nothing sent, the tenant's Secret not read
    assert m.error is MeasurementError.BAD_QUERY and m.value is None
    assert "--prometheus-allow" in m.detail and "tenancy.prometheusAllow" in m.detail


def test_a_token_is_never_sent_to_an_address_outside_the_allow_list(
        prometheus: tuple[str, list[bytes]]) -> None:
    foreign, seen = prometheus
    kube = SecretStore()
    deps = Deps(kube=kube, post_event=no_events,
                prometheus_allow=("http://prometheus.monitoring:9090",))
    result = run_measure(deps, spec_for(foreign))
    assert seen == []  # not one request reached it
    assert kube.reads == []  # and the tenant's Secret was not even read
    m = result["errors"]
    assert m.error is MeasurementError.BAD_QUERY and m.value is None  # an error, never a pass
    assert "--prometheus-allow" in m.detail and "tenancy.prometheusAllow" in m.detail


def test_an_allowed_address_is_queried_with_its_token(
        prometheus: tuple[str, list[bytes]]) -> None:
    address, seen = prometheus
    deps = Deps(kube=SecretStore(), post_event=no_events,
                prometheus_allow=(address + "/",))
    result = run_measure(deps, spec_for(address))
    assert result["errors"].error is None
    assert sent(seen)[0]["auth"] == "Bearer tenant-secret-token"


def confined_measure(address: str, query: str) -> Any:
    deps = Deps(kube=SecretStore(), post_event=no_events, prometheus_allow=(address,))
    assert deps.confine_queries  # the default
    return run_measure(deps, spec_for(address, query))["custom"]


def test_confined_queries_reach_prometheus_with_the_rollouts_namespace(
        prometheus: tuple[str, list[bytes]]) -> None:
    address, seen = prometheus
    assert confined_measure(address, 'sum(rate(requests_total{code="500"}[1m]))').error is None
    assert sent(seen)[-1]["query"] == \
        'sum(rate(requests_total{code="500",namespace="team-a"}[1m]))'


def test_a_query_for_another_namespace_is_an_error_and_not_sent(
        prometheus: tuple[str, list[bytes]]) -> None:
    address, seen = prometheus
    m = confined_measure(address, 'sum(up{namespace="kube-system"})')
    assert seen == []
    assert m.error is MeasurementError.BAD_QUERY and 'namespace="kube-system"' in m.detail


@pytest.mark.parametrize(("address", "allowed"), [
    ("http://prometheus.monitoring:9090", True),
    ("http://prometheus.monitoring:9090/", True),
    ("http://PROMETHEUS.monitoring:9090", True),
    ("https://thanos.example.com/tenant-a/api", True),
    ("https://thanos.example.com:443/tenant-a", True),
    ("http://prometheus.monitoring.evil.example:9090", False),  # not a string prefix
    ("http://prometheus.monitoring:9091", False),
    ("https://prometheus.monitoring:9090", False),
    ("https://thanos.example.com/tenant-ab", False),  # a path boundary, not a prefix
    ("https://thanos.example.com/", False),
    ("http://prometheus.monitoring", False),
])
def test_allow_list_entries_are_compared_as_urls(address: str, allowed: bool) -> None:
    entries = ["http://prometheus.monitoring:9090", "https://thanos.example.com/tenant-a"]
    assert address_allowed(address, entries) is allowed


def test_allow_list_entries_must_be_base_urls() -> None:
    assert check_allow_list(["http://p:9090", "p:9090", "http://p/?x=1", "ftp://p"]) == [
        "p:9090", "http://p/?x=1", "ftp://p"]


def test_the_clients_cache_is_bounded_and_closes_what_it_evicts() -> None:
    async def go() -> tuple[int, bool, bool]:
        deps = Deps(kube=SecretStore(), post_event=no_events, max_sources=3,
                    prometheus_allow_any=True, confine_queries=False)
        # An evicted client is closed once a query it may serve has timed out (here 0.1 s + 1 s).
        first = await deps.source_for(spec_for("http://p0:9090", timeout="100ms"), "ns")
        for i in range(1, 10):
            await deps.source_for(spec_for(f"http://p{i}:9090", timeout="100ms"), "ns")
        assert len(deps.sources) == 3
        await asyncio.gather(*deps._closing)
        assert isinstance(first, PrometheusSource)
        return len(deps.sources), first._client.is_closed, \
            all(isinstance(s, PrometheusSource) and not s._client.is_closed
                for s in deps.sources.values())
    size, first_closed, kept_open = asyncio.run(go())
    assert (size, first_closed, kept_open) == (3, True, True)


def test_a_used_client_stays_cached() -> None:
    async def go() -> bool:
        deps = Deps(kube=SecretStore(), post_event=no_events, max_sources=2,
                    prometheus_allow_any=True, confine_queries=False)
        kept = await deps.source_for(spec_for("http://p0:9090"), "ns")
        for i in range(1, 6):
            await deps.source_for(spec_for(f"http://p{i}:9090"), "ns")
            assert await deps.source_for(spec_for("http://p0:9090"), "ns") is kept
        return True
    assert asyncio.run(go())


@pytest.mark.parametrize("secret_data", [
    {"token": base64.b64encode("tök€n".encode()).decode()},  # non-ASCII: UnicodeEncodeError
    {"token": base64.b64encode(b"abc\ndef").decode()},  # a newline inside
    {"token": "not base64!"},
    {"token": base64.b64encode(b"\xff\xfe").decode()},  # not UTF-8
])
def test_a_token_that_is_not_a_bearer_token_is_an_error_that_does_not_quote_it(
        prometheus: tuple[str, list[bytes]], secret_data: dict[str, str]) -> None:
    address, seen = prometheus

    class OddSecret(SecretStore):
        async def get(self, path: str, params: dict[str, str] | None = None
                      ) -> dict[str, Any]:
            return {"data": secret_data}

    deps = Deps(kube=OddSecret(), post_event=no_events, prometheus_allow=(address,))
    m = run_measure(deps, spec_for(address))["errors"]
    assert seen == []
    assert m.error is MeasurementError.UNREACHABLE and "is not a bearer token" in m.detail
    for secret in ("tök", "abc", "def"):
        assert secret not in m.detail


def test_vector_queries_are_confined_and_refused_alike(
        prometheus: tuple[str, list[bytes]]) -> None:
    from inference_rollout.metrics.source import BadQuery, PrometheusSource
    from inference_rollout.metrics.tenancy import NamespaceConfined, refused

    address, seen = prometheus

    async def go() -> None:
        async with PrometheusSource(address) as source:
            confined = NamespaceConfined(source, "team-a")
            with pytest.raises(BadQuery, match="without the label"):
                await confined.query_vector("sum by (pod) (up)", "pod")  # VECTOR has no pod
            with pytest.raises(BadQuery, match='namespace="team-b"'):
                await confined.query_vector('up{namespace="team-b"}', "pod")
        with pytest.raises(BadQuery, match="not allowed"):
            await refused("http://elsewhere:9090").query_vector("up", "pod")
    asyncio.run(go())
    assert [r["query"] for r in sent(seen)] == ['sum by (pod) (up{namespace="team-a"})']


def test_gateway_templates_are_not_confined_and_a_tenants_query_is(
        prometheus: tuple[str, list[bytes]]) -> None:
    """The gateway's counters carry the gateway's namespace: confined to the rollout's they read
    nothing (why confinement could not be the default before). The operator's own gateway
    queries go unconfined; the tenant's text is still confined."""
    address, seen = prometheus
    spec = InferenceRolloutSpec.parse(manifest_spec(analysis={
        "interval": "10s", "prometheus": {"address": address},
        "metrics": [{"name": "gw", "template": "gateway-error-rate", "max": 0.01},
                    {"name": "custom", "query": "sum(up)", "max": 1}]}))
    deps = Deps(kube=SecretStore(), post_event=no_events, prometheus_allow=(address,))
    status = InferenceRolloutStatus(stable_revision="5151515151", canary_revision="c1c1c1c1c1",
                                    canary_weight=5, current_step=0)
    asyncio.run(_measure(deps, spec, status, "team-a", "chat"))  # as the reconciler measures
    queries = [q["query"] for q in sent(seen)]
    assert "sum(up{namespace=\"team-a\"})" in queries
    gateway = [q for q in queries if "traefik_service_requests_total" in q]
    assert gateway and all('namespace="team-a"' not in q for q in gateway), gateway
    assert all("team-a-chat-c1c1c1c1c1-" in q for q in gateway)  # only this rollout's Service
