"""The gateway's view (metrics/gateway_templates.py): valid PromQL for every gateway, backends
selected exactly (a neighbour rollout or another revision never matches), names escaped, the
traffic-share guard only over a window with one weight in force, and the spec's rules."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import promql_parser as pp
import pytest
from pydantic import ValidationError

from inference_rollout.api.spec import MetricSpec
from inference_rollout.core.types import MeasurementError
from inference_rollout.core.verdicts import judge
from inference_rollout.metrics.gateway_templates import GATEWAYS, _traefik_name
from inference_rollout.metrics.measure import build_queries, measure
from inference_rollout.metrics.promql import Revision

REV = Revision("prod", "chat", "7d9f8c6b5a")
DOC = Path(__file__).parents[2] / "docs" / "metrics.md"


def metric(**kw: Any) -> MetricSpec:
    return MetricSpec.model_validate({"name": "m", "max": 0.01,
                                      "template": "gateway-error-rate", **kw})


def share(**kw: Any) -> MetricSpec:
    return metric(template="gateway-traffic-share", max=2, **kw)


def all_queries(rev: Revision = REV) -> list[tuple[str, str]]:
    out = []
    for gateway in GATEWAYS:
        for m in (metric(gateway=gateway), share(gateway=gateway)):
            q = build_queries(m, rev, "60s", 20, counts=True, weight=5)
            for kind in ("value", "samples", "evidence"):
                text = getattr(q, kind)
                if text is not None:
                    out.append((f"{gateway}/{m.template}/{kind}", text))
    return out


@pytest.mark.parametrize(("name", "query"), all_queries())
def test_every_query_is_valid_promql(name: str, query: str) -> None:
    pp.parse(query)


def selectors(query: str) -> list[dict[str, tuple[str, str]]]:
    """Each vector selector's matchers as {label: (op, value)}."""
    out = []
    stack = [pp.parse(query)]
    while stack:
        e = stack.pop()
        if isinstance(e, pp.VectorSelector):
            out.append({m.name: (str(m.op).rsplit(".", 1)[-1], m.value)
                        for m in e.matchers.matchers})
            continue
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(e, attr, None)
            if child is not None and not isinstance(child, int | float | str):
                stack.append(child)
        for arg in getattr(e, "args", None) or []:
            stack.append(arg)
    return out


def matches(query: str, label: str, value: str) -> bool:
    """Whether every selector of ``query`` that matches ``label`` by regex accepts ``value``
    (Python's re on these patterns behaves as RE2: no lookarounds or backreferences)."""
    found = [s[label] for s in selectors(query) if label in s]
    assert found, query
    return all(re.fullmatch(v, value) is not None for _, v in found)


def test_traefik_selects_the_revisions_service_as_traefik_names_it() -> None:
    q = build_queries(metric(), REV, "60s", 20).value
    assert "traefik_service_requests_total" in q
    assert matches(q, "service", "prod-chat-7d9f8c6b5a-8000@kubernetesgateway")
    assert not matches(q, "service", "prod-chat-0123456789-8000@kubernetesgateway")
    assert not matches(q, "service", "prod-chat-abc-7d9f8c6b5a-8000@kubernetesgateway")
    assert not matches(q, "service", "prod-chat-7d9f8c6b5a-8000@kubernetescrd")


#: Traefik v3.7's name of a route's Service backend (read off the sandbox's Traefik v3.7.13).
ROUTER = "httproute-prod-chat-gw-gateway-system-traefik-ep-web-0-c4b3ce1b812cc6cd825e"


def test_traefik_v3_7_names_its_backend_after_the_router() -> None:
    q = build_queries(metric(), REV, "60s", 20).value
    assert matches(q, "service", f"{ROUTER}-svc-prod-chat-7d9f8c6b5a-1@kubernetesgateway")
    assert not matches(q, "service", f"{ROUTER}-svc-prod-chat-0123456789-1@kubernetesgateway")
    assert not matches(q, "service", f"{ROUTER}-svc-prod-chat-abc-7d9f8c6b5a-0@kubernetesgateway")
    # the same rollout name in another namespace, under its own route
    other = ROUTER.replace("-prod-", "-staging-", 1)
    assert not matches(q, "service", f"{other}-svc-staging-chat-7d9f8c6b5a-1@kubernetesgateway")
    # the weighted parent service is not a backend's
    assert not matches(q, "service", f"{ROUTER}-wrr@kubernetesgateway")


def test_the_share_counts_every_revision_of_the_rollout_and_nothing_else() -> None:
    q = build_queries(share(), REV, "60s", 20, weight=20)
    total = q.samples
    assert total is not None
    for name in ("prod-chat-7d9f8c6b5a-8000", "prod-chat-0123456789-8000"):
        assert matches(total, "service", f"{name}@kubernetesgateway")
    for other in ("prod-chat-abc-0123456789-8000", "prod-chatty-0123456789-8000",
                  "staging-chat-0123456789-8000"):
        assert not matches(total, "service", f"{other}@kubernetesgateway")
    assert q.value.startswith("abs(100 * (sum(increase(") and q.value.endswith(" - 20)")


@pytest.mark.parametrize(("gateway", "label", "own", "neighbour"), [
    ("istio", "destination_service_name", "chat-7d9f8c6b5a", "chat-abc-7d9f8c6b5a"),
    ("kgateway", "envoy_cluster_name", "kube_prod_chat-7d9f8c6b5a_8000",
     "kube_prod_chat-abc-7d9f8c6b5a_8000"),
])
def test_other_gateways_select_the_revision_exactly(gateway: str, label: str, own: str,
                                                     neighbour: str) -> None:
    q = build_queries(metric(gateway=gateway), REV, "60s", 20).value
    assert GATEWAYS[gateway].metric in q
    assert matches(q, label, own) and not matches(q, label, neighbour)
    if gateway == "istio":
        assert all(s["destination_service_namespace"] == ("Equal", "prod") for s in selectors(q))


def test_names_that_would_break_out_of_a_string_are_escaped() -> None:
    hostile = Revision('prod",namespace=~".+', "chat.*", "7d9f8c6b5a")
    for name, query in all_queries(hostile):
        pp.parse(query)  # still one valid query
        for s in selectors(query):
            assert "namespace" not in s, name  # no matcher was injected


def test_traefik_normalises_names_like_traefik() -> None:
    assert _traefik_name("prod-chat-7d9f8c6b5a-8000") == "prod-chat-7d9f8c6b5a-8000"
    assert _traefik_name("team.a-chat--x") == "team-a-chat-x"


def test_docs_show_the_traefik_queries_as_sent() -> None:
    doc = re.sub(r"\s+", "", DOC.read_text())
    for name, query in all_queries():
        if name.startswith("traefik/"):
            assert re.sub(r"\s+", "", query.replace("- 5)", "- W)")) in doc, name


# --- measure: the share needs one weight in force over its whole window -----------------------


class Recorder:
    def __init__(self) -> None:
        self.queries: list[str] = []

    async def query(self, promql: str, at: float | None = None) -> float:
        self.queries.append(promql)
        return 1.0 if promql.startswith("abs(") else 5000.0

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        raise AssertionError(f"unexpected vector query {promql}")


def measure_share(**kw: Any) -> tuple[Any, Recorder]:
    source = Recorder()
    got = asyncio.run(measure(source, "prod", "chat", REV.revision, "0123456789", [share()],
                              interval_s=60, default_min_samples=20, scrape_interval_s=15,
                              at=10_000.0, **kw))
    return got["m"], source


def test_the_share_is_not_measured_before_the_gateway_serves_the_weight() -> None:
    m, source = measure_share()
    assert m.error is MeasurementError.TOO_FEW_SAMPLES and source.queries == []
    assert "not in force at the gateway" in m.detail


def test_the_share_is_not_measured_over_a_window_spanning_two_weights() -> None:
    m, source = measure_share(weight=20, weight_since=10_000.0 - 30)
    assert m.error is MeasurementError.TOO_FEW_SAMPLES and source.queries == []
    assert "reaches back before the canary's 20%" in m.detail
    m, source = measure_share(weight=20, weight_since=10_000.0 - 61)
    assert m.error is None and m.value == 1.0
    assert any(q.endswith(" - 20)") for q in source.queries)


def test_a_share_within_tolerance_passes_and_outside_fails() -> None:
    from inference_rollout.core.types import Measurement

    assert judge(share(), Measurement(1.4, samples=5000)).verdict == "Pass"
    assert judge(share(), Measurement(2.6, samples=5000)).verdict == "Fail"


# --- the spec ----------------------------------------------------------------------------------


def test_gateway_is_only_for_gateway_templates() -> None:
    with pytest.raises(ValidationError, match="only the gateway-error-rate"):
        metric(template="error-rate", gateway="istio")


@pytest.mark.parametrize("bad", [{"max": 2, "maxRatioToStable": 1.5}, {"min": 1}])
def test_the_share_takes_a_max_in_points(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="percentage points"):
        MetricSpec.model_validate({"name": "m", "template": "gateway-traffic-share", **bad})


def test_gateway_error_rate_uses_the_sequential_error_test() -> None:
    from inference_rollout.api.spec import AnalysisSpec
    from inference_rollout.core.types import Evidence, Measurement
    from inference_rollout.core.verdicts import rates_for

    ev = Evidence(300.0, requests=400.0, errors=40.0)
    j = judge(metric(), Measurement(0.1, samples=400, evidence=ev), rates_for(AnalysisSpec(), 4))
    assert j.verdict == "Fail" and j.test_text is not None and "40/400 failed" in j.test_text
