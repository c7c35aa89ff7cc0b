"""The built-in templates and measure() against a REAL Prometheus scraping vLLM-style metrics.

The world: rollout ``chat`` in namespace ``prod`` with a canary revision (one pod, new vLLM metric
names, slow and erroring) and a stable revision (two pods, the older metric names, healthy), a
quiet revision (series exist, no traffic), and decoys that a sloppy selector would pick up: a
rollout named ``chat-<canary>`` and the same pod name in another namespace, both terrible.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.integration.fake_vllm_exporter import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    TTFT_BUCKETS,
    FakeVllmExporter,
    PodProfile,
    bucket_bounds,
)

from inference_rollout.api.spec import MetricSpec
from inference_rollout.core import sequential as sq
from inference_rollout.core import verdicts as an
from inference_rollout.core.types import Measurement, MeasurementError
from inference_rollout.metrics import NoData, PrometheusSource, measure
from inference_rollout.metrics.tenancy import NamespaceConfined
from irsandbox.common import free_port

pytestmark = pytest.mark.integration

NS, ROLLOUT = "prod", "chat"
CANARY, STABLE, QUIET, ABSENT = "7d9f8c6b5", "5b6c7d8f9", "4c4c4c4c4", "0a0a0a0a0"
UNSERVED = "3d3d3d3d3"  # scraped, and no request series yet (a lazy exporter)
WINDOW_S = 8  # analysis interval in these tests; scrape interval is 1s

CANARY_POD = PodProfile(
    NS, f"chat-{CANARY}-bcdfg2456-kx2lq", requests=10, ttft=0.4, itl=0.09, old_itl=0.6, e2e=4.0,
    finished={"stop": 8, "length": 1, "error": 1, "abort": 0}, http={"2xx": 8, "5xx": 2},
    prefix_hits=30, prefix_queries=100, preemptions=2, kv_usage=0.93, gpu_temp=86.0,
)
STABLE_PODS = [
    PodProfile(NS, f"chat-{STABLE}-bcdfg2456-{sfx}", requests=5, ttft=0.07, itl=0.03, e2e=1.2,
               new_names=False, finished={"stop": 9, "length": 1}, http={"2xx": 1},
               prefix_hits=70, prefix_queries=100, kv_usage=usage, gpu_temp=temp)
    for sfx, usage, temp in (("mz9wr", 0.5, 70.0), ("tq7vn", 0.6, 72.0))
]
BAD = dict(requests=10, ttft=30.0, itl=5.0, e2e=100.0, finished={"error": 1},
           http={"5xx": 1}, prefix_hits=0, preemptions=50, kv_usage=0.99, gpu_temp=99.0)
DECOYS = [
    # rollout "chat-7d9f8c6b5", revision "x9x9x9x9x": its pods start with the canary's prefix
    PodProfile(NS, f"chat-{CANARY}-x9x9x9x9x-bcdfg2456-kx2lq", **BAD),  # type: ignore[arg-type]
    # the canary's exact pod name, in another namespace
    PodProfile("staging", CANARY_POD.pod, **BAD),  # type: ignore[arg-type]
]
QUIET_POD = PodProfile(NS, f"chat-{QUIET}-bcdfg2456-zzzzz", requests=0)
UNSERVED_POD = PodProfile(NS, f"chat-{UNSERVED}-bcdfg2456-zzzzz", requests=0, lazy=True)
# A rollout name with a regex metacharacter ('.' — not a valid Kubernetes name, but label values
# can be anything) next to a pod it would match if '.' were not escaped.
DOT_PODS = [
    PodProfile(NS, "chat.v2-r1-bcdfg2456-kx2lq", gpu_temp=60.0),
    PodProfile(NS, "chatxv2-r1-bcdfg2456-kx2lq", gpu_temp=95.0),
]
ALL_PODS = [CANARY_POD, *STABLE_PODS, *DECOYS, QUIET_POD, UNSERVED_POD, *DOT_PODS]

TEMPLATE_NAMES = ("ttft-p99", "itl-p99", "e2e-p99", "error-rate", "kv-cache-hit-rate",
                  "preemptions", "kv-cache-usage", "gpu-temperature")
REQUEST_BASED = TEMPLATE_NAMES[:6]


@pytest.fixture(scope="module")
def prom_url(prometheus: Any) -> Iterator[str]:
    with FakeVllmExporter(ALL_PODS) as exporter:
        server = prometheus(exporter.scrape_configs(), scrape_interval="1s")
        server.wait_for_targets(len(ALL_PODS))
        # A full window of history, so rate() over WINDOW_S sees every tick it should.
        job = f"{NS}/{CANARY_POD.pod}"
        server.wait_until(f'count_over_time(up{{job="{job}"}}[1m])',
                          lambda r: bool(r) and float(r[0]["value"][1]) >= WINDOW_S + 2)
        yield server.url
        server.stop()


def run(url: str, revision: str, metrics: list[MetricSpec], *, stable: str | None = STABLE,
        rollout: str = ROLLOUT, namespace: str = NS, min_samples: int = 20,
        timeout_s: float = 5.0,
        pods: dict[str, tuple[str, ...]] | None = None) -> dict[str, Measurement]:
    async def go() -> dict[str, Measurement]:
        async with PrometheusSource(url, timeout_s=timeout_s) as source:
            return await measure(source, namespace, rollout, revision, stable, metrics,
                                 interval_s=WINDOW_S, default_min_samples=min_samples,
                                 scrape_interval_s=1.0, pods=pods)

    return asyncio.run(go())


def absolute(template: str, **kw: Any) -> MetricSpec:
    return MetricSpec(name=template, template=template, max=1e9, **kw)  # type: ignore[arg-type]


def relative(template: str) -> MetricSpec:
    return MetricSpec(name=template, template=template,  # type: ignore[arg-type]
                      max_ratio_to_stable=1.2)


def within(value: float | None, bounds: tuple[float, float]) -> bool:
    return value is not None and bounds[0] < value <= bounds[1]


def test_every_template_measures_canary_against_stable(prom_url: str) -> None:
    got = run(prom_url, CANARY, [relative(t) for t in TEMPLATE_NAMES])
    for name, m in got.items():
        assert m.error is None, (name, m)

    assert within(got["ttft-p99"].value, bucket_bounds(TTFT_BUCKETS, 0.4))
    assert within(got["ttft-p99"].stable_value, bucket_bounds(TTFT_BUCKETS, 0.07))
    # The canary also exposes the deprecated TPOT histogram at 0.6s: the new name must win.
    assert within(got["itl-p99"].value, bucket_bounds(ITL_BUCKETS, 0.09))
    # The stable exposes only the old name: the fallback must find it.
    assert within(got["itl-p99"].stable_value, bucket_bounds(ITL_BUCKETS, 0.03))
    assert within(got["e2e-p99"].value, bucket_bounds(E2E_BUCKETS, 4.0))
    assert within(got["e2e-p99"].stable_value, bucket_bounds(E2E_BUCKETS, 1.2))

    # Engine errors are 1/10, HTTP 5xx 2/10: the template reports the larger view.
    assert got["error-rate"].value == pytest.approx(0.2, rel=1e-3)
    # Stable has neither an "error" series nor a 5xx series: 0, not no-data.
    assert got["error-rate"].stable_value == 0.0
    assert got["kv-cache-hit-rate"].value == pytest.approx(0.3, rel=1e-3)
    assert got["kv-cache-hit-rate"].stable_value == pytest.approx(0.7, rel=1e-3)  # old names
    assert got["preemptions"].value == pytest.approx(0.2, rel=1e-3)  # 2 per 10 requests
    assert got["preemptions"].stable_value == 0.0
    assert got["kv-cache-usage"].value == pytest.approx(0.93)
    assert got["kv-cache-usage"].stable_value == pytest.approx(0.6)  # max of two pods, old name
    assert got["gpu-temperature"].value == 86.0
    assert got["gpu-temperature"].stable_value == 72.0

    # Sample guard: ~10 requests/s for the canary, 2×5 for stable, over an 8s window; the
    # reported count is the smaller side's.
    for name in REQUEST_BASED:
        assert got[name].samples is not None and 40 <= got[name].samples <= 130, (name, got[name])
    assert got["gpu-temperature"].samples is None  # gauges have no guard


def test_revision_without_series_is_no_data(prom_url: str) -> None:
    got = run(prom_url, ABSENT, [absolute(t) for t in TEMPLATE_NAMES])
    for name, m in got.items():
        assert (m.error, m.value) == (MeasurementError.NO_DATA, None), (name, m)


def test_scraped_pods_without_request_series_are_too_few_samples_not_no_data(
        prom_url: str) -> None:
    """A server that creates its request series at its first request (the sandbox's simulator)
    behind a 5 % canary at low traffic: its pods are scraped, it has served nothing yet.  That
    is a window without evidence, not a broken selector (which stays NoData: the test above)."""
    got = run(prom_url, UNSERVED, [absolute(t) for t in REQUEST_BASED])
    for name, m in got.items():
        assert m.error is MeasurementError.TOO_FEW_SAMPLES, (name, m)
        assert m.samples == 0.0 and "served no request yet" in m.detail, (name, m)
    # Relative: the stable has series; the canary has none yet.
    rel = run(prom_url, UNSERVED, [relative("ttft-p99")])
    assert rel["ttft-p99"].error is MeasurementError.TOO_FEW_SAMPLES, rel
    # Gauges are not request-counted: the pod's own value.
    assert run(prom_url, UNSERVED, [absolute("kv-cache-usage")])["kv-cache-usage"].value == 0.5


def test_relative_check_without_stable_series_is_no_data(prom_url: str) -> None:
    got = run(prom_url, CANARY, [relative("ttft-p99")], stable=ABSENT)
    assert got["ttft-p99"].error is MeasurementError.NO_DATA
    assert got["ttft-p99"].detail.startswith("stable:")


def test_quiet_window_is_too_few_samples_not_an_error(prom_url: str) -> None:
    got = run(prom_url, QUIET, [absolute(t) for t in TEMPLATE_NAMES])
    for name in REQUEST_BASED:
        m = got[name]
        assert m.error is MeasurementError.TOO_FEW_SAMPLES, (name, m)
        assert m.samples == 0.0
    # Gauges have no sample guard: the quiet pod's KV usage is still a value.
    assert got["kv-cache-usage"].error is None and got["kv-cache-usage"].value == 0.5


def test_too_few_samples_still_reports_the_value(prom_url: str) -> None:
    got = run(prom_url, CANARY, [absolute("ttft-p99", min_samples=100_000)])
    m = got["ttft-p99"]
    assert m.error is MeasurementError.TOO_FEW_SAMPLES
    assert within(m.value, bucket_bounds(TTFT_BUCKETS, 0.4))
    assert "minSamples 100000" in m.detail


def test_selector_does_not_leak_into_lookalike_pods(prom_url: str) -> None:
    # Decoys (rollout "chat-<canary>", same pod name in "staging") have TTFT 30s, temp 99°C.
    got = run(prom_url, CANARY, [absolute("ttft-p99"), absolute("gpu-temperature")])
    assert got["ttft-p99"].value is not None and got["ttft-p99"].value <= 0.5
    assert got["gpu-temperature"].value == 86.0
    # '.' in a rollout name is literal: "chat.v2" must not select "chatxv2-…".
    dot = run(prom_url, "r1", [absolute("gpu-temperature")], rollout="chat.v2")
    assert dot["gpu-temperature"].value == 60.0


def test_serving_versions_select_their_pods_by_name(prom_url: str) -> None:
    """A rollout with adapters (docs/adapters.md): its serving versions share their template's
    pods, so each is measured on the pods its set holds, named; here the canary's one pod and
    the stable's two under keys that no pod name contains, and a set with no pod (all moving)."""
    canary_sv, stable_sv, empty_sv = "a1a1a1a1a1", "b2b2b2b2b2", "c3c3c3c3c3"
    pods = {canary_sv: (CANARY_POD.pod,), stable_sv: tuple(p.pod for p in STABLE_PODS),
            empty_sv: ()}
    metrics = [relative("ttft-p99"), relative("error-rate"), relative("gpu-temperature")]
    named = run(prom_url, canary_sv, metrics, stable=stable_sv, pods=pods)
    by_pattern = run(prom_url, CANARY, metrics)
    for name in ("ttft-p99", "error-rate", "gpu-temperature"):
        assert named[name].error is None, named[name]
        assert named[name].value == pytest.approx(by_pattern[name].value, rel=0.05), name
        assert named[name].stable_value == pytest.approx(by_pattern[name].stable_value,
                                                         rel=0.05), name
    # The canary's pod name is also a decoy's in "staging" (terrible): the namespace holds.
    assert named["gpu-temperature"].value == 86.0
    nothing = run(prom_url, empty_sv, [absolute("gpu-temperature")], stable=None, pods=pods)
    assert nothing["gpu-temperature"].error is MeasurementError.NO_DATA


@pytest.mark.parametrize(
    ("namespace", "rollout"),
    [
        (NS, ".*"),  # unescaped, ".*-7d9f8c6b5-…" would select the canary's pods
        ('prod",namespace=~".+', ROLLOUT),  # would add a matcher
        ('prod"} or vector(86) or {x="', ROLLOUT),  # would add an expression
        ("prod\\", ROLLOUT),  # a trailing backslash would escape the closing quote
    ],
)
def test_hostile_names_cannot_break_out_of_the_selector(
    prom_url: str, namespace: str, rollout: str
) -> None:
    got = run(prom_url, CANARY, [absolute("gpu-temperature"), absolute("ttft-p99")],
              namespace=namespace, rollout=rollout)
    for name, m in got.items():
        assert m.error is MeasurementError.NO_DATA, (name, m)


def test_custom_query_with_placeholders(prom_url: str) -> None:
    stop_share = MetricSpec(
        name="stop-share", min_ratio_to_stable=0.95,
        query=('sum(rate(vllm:request_success_total{{{selector}},finished_reason="stop"}'
               "[{{window}}])) / sum(rate(vllm:request_success_total{{{selector}}}[{{window}}]))"),
    )
    running = MetricSpec(
        name="running", max=100,
        query='sum(vllm:num_requests_running{namespace="{{namespace}}",pod=~"{{name}}-{{revision}}-[a-z0-9]+-[a-z0-9]+"})',
    )
    got = run(prom_url, CANARY, [stop_share, running])
    assert got["stop-share"].value == pytest.approx(0.8, rel=1e-3)
    assert got["stop-share"].stable_value == pytest.approx(0.9, rel=1e-3)
    assert got["stop-share"].samples is None  # custom queries: no guard unless minSamples is set
    assert got["running"].value == 3.0


def test_confined_custom_queries_read_only_the_rollouts_namespace(prom_url: str) -> None:
    """--confine-queries against a real Prometheus: the canary's pod name also exists in
    "staging" (a decoy at 99 °C); a query without a namespace matcher reads it, confined it does
    not, and the rendered forms (subquery, offset, binary operation) are valid PromQL."""
    pod = CANARY_POD.pod
    queries = {
        "plain": f'max(DCGM_FI_DEV_GPU_TEMP{{pod="{pod}"}})',
        "subquery": f'max(max_over_time(DCGM_FI_DEV_GPU_TEMP{{pod="{pod}"}}[4s:1s]))',
        "offset": f'max(DCGM_FI_DEV_GPU_TEMP{{pod="{pod}"}} offset 1s) * 1',
        "escape": f'max(DCGM_FI_DEV_GPU_TEMP{{pod=~".*", namespace=~".+", pod="{pod}"}})',
    }
    metrics = [MetricSpec(name=n, query=q, max=1000) for n, q in queries.items()]
    open_ = run(prom_url, CANARY, metrics)
    assert {n: m.value for n, m in open_.items()} == dict.fromkeys(queries, 99.0)

    async def confined() -> dict[str, Measurement]:
        async with PrometheusSource(prom_url, timeout_s=5.0) as source:
            return await measure(NamespaceConfined(source, NS), NS, ROLLOUT, CANARY, None,
                                 metrics, interval_s=WINDOW_S, default_min_samples=0,
                                 scrape_interval_s=1.0)

    got = asyncio.run(confined())
    assert {n: (m.error, m.value) for n, m in got.items()} == dict.fromkeys(queries, (None, 86.0))


def test_broken_promql_is_bad_query(prom_url: str) -> None:
    metrics = [
        MetricSpec(name="syntax", max=1, query="sum(rate(vllm:e2e_request_latency_seconds_count"),
        MetricSpec(name="many", max=1,  # every pod of the namespace, not aggregated
                   query='vllm:num_requests_running{namespace="{{namespace}}"}'),
        MetricSpec(name="range", max=1, query="vllm:num_requests_running{{{selector}}}[1m]"),
        MetricSpec(name="many-to-many", max=1,
                   query="vllm:num_requests_running + on() vllm:num_requests_running"),
        MetricSpec(name="placeholder", max=1, query="sum(up{pod=\"{{pod}}\"})"),
    ]
    got = run(prom_url, CANARY, metrics)
    for name, m in got.items():
        assert m.error is MeasurementError.BAD_QUERY, (name, m)
    assert "parse error" in got["syntax"].detail
    assert "must aggregate to one series" in got["many"].detail
    assert "matrix" in got["range"].detail
    assert "{{pod}}" in got["placeholder"].detail


def test_dead_prometheus_is_unreachable(prom_url: str) -> None:
    got = run(f"http://127.0.0.1:{free_port()}", CANARY,
              [relative("ttft-p99"), absolute("gpu-temperature")], timeout_s=2.0)
    for name, m in got.items():
        assert m.error is MeasurementError.UNREACHABLE, (name, m)


def test_source_numbers_straight_from_prometheus(prom_url: str) -> None:
    async def go(promql: str) -> float:
        async with PrometheusSource(prom_url) as s:
            return await s.query(promql)

    assert asyncio.run(go("1 + 1")) == 2.0  # a scalar result
    inf = asyncio.run(go("vector(1) / 0"))
    assert math.isinf(inf) and inf > 0  # like histogram_quantile's +Inf bucket: a real value
    with pytest.raises(NoData, match="NaN"):
        asyncio.run(go("vector(0) / 0"))  # like a quantile or ratio over a window with no traffic


def run_since(url: str, metrics: list[MetricSpec], seconds: float) -> dict[str, Measurement]:
    """measure() under the Sequential rule: evidence since ``seconds`` ago."""
    async def go() -> dict[str, Measurement]:
        async with PrometheusSource(url) as source:
            return await measure(source, NS, ROLLOUT, CANARY, STABLE, metrics,
                                 interval_s=WINDOW_S, default_min_samples=20,
                                 scrape_interval_s=1.0, at=now, since=now - seconds)

    now = time.time()
    return asyncio.run(go())


def test_sequential_counts_come_from_real_promql(prom_url: str) -> None:
    ttft = MetricSpec(name="ttft", template="ttft-p99", max=0.45)  # canary at 0.4: (0.25, 0.5]
    ttft_low = MetricSpec(name="ttft-low", template="ttft-p99", max=0.2)  # surely over
    itl = MetricSpec(name="itl", template="itl-p99", max=0.3)  # new name (0.09) wins over 0.6
    errors = MetricSpec(name="errors", template="error-rate", max=0.01)
    rel = MetricSpec(name="rel", template="error-rate", max_ratio_to_stable=1.5)
    got = run_since(prom_url, [ttft, ttft_low, itl, errors, rel], seconds=WINDOW_S)
    for name, m in got.items():
        assert m.evidence is not None and m.evidence.period_s == WINDOW_S, (name, m)

    buckets = {n: m.evidence.buckets for n, m in got.items() if m.evidence is not None}
    requests, sure, possible = sq.exceedances(buckets["ttft"], 0.45)
    assert 60 <= requests <= 130  # ~10 requests/s for 8 s, extrapolated by increase()
    assert sure == 0 and possible == pytest.approx(requests)  # all in the limit's bucket
    _, sure_low, _ = sq.exceedances(buckets["ttft-low"], 0.2)
    assert sure_low == pytest.approx(requests)
    _, itl_over, _ = sq.exceedances(buckets["itl"], 0.3)
    assert itl_over == 0  # the deprecated TPOT series (0.6 s) of the same pod is not counted

    ev = got["errors"].evidence
    assert ev is not None and ev.requests is not None and ev.errors is not None
    assert ev.errors / ev.requests == pytest.approx(0.2, rel=1e-3)  # the HTTP view: 2 of 10
    rel_ev = got["rel"].evidence
    assert rel_ev is not None and rel_ev.stable_errors == 0 and rel_ev.stable_requests

    rates = sq.error_rates(0.01, metrics=5, steps=4)
    assert an.judge(ttft_low, got["ttft-low"], rates).verdict == "Fail"
    assert an.judge(ttft, got["ttft"], rates).verdict == "Inconclusive"  # cannot tell 0.4 > 0.45
    assert an.judge(errors, got["errors"], rates).verdict == "Fail"
    # ITL counts tokens (4 per request here): ~320 clean observations pass
    assert an.judge(itl, got["itl"], rates).verdict == "Pass"


BORN = "4b4b4b4b4"


def test_the_first_error_of_a_new_series_counts(prometheus: Any) -> None:
    """A counter labelled by outcome (``status="5xx"``) has no series until its first error and
    appears at 1: plain ``increase()`` counts 0 for it (1 → 1), so a canary's first error was
    never seen.  The error-rate template counts it, in its value, samples and counts."""
    pod = PodProfile(NS, f"chat-{BORN}-bcdfg2456-b0rn1", requests=2, finished={"stop": 1},
                     http={"2xx": 1})
    with FakeVllmExporter([pod]) as exporter:
        server = prometheus(exporter.scrape_configs(), scrape_interval="1s")
        server.wait_until(f'count_over_time(up{{pod="{pod.pod}"}}[1m])',
                          lambda r: bool(r) and float(r[0]["value"][1]) >= WINDOW_S + 2)
        with exporter.lock:  # one request fails: its series is born at 1 and stays there
            pod.state["http:5xx"] = 1.0
            pod.http = {"2xx": 1, "5xx": 0}
        five = f'http_requests_total{{pod="{pod.pod}",status="5xx"}}'
        server.wait_until(f"count_over_time({five}[1m])", lambda r: bool(r)
                          and float(r[0]["value"][1]) >= 3)
        # The fact behind the change, from the real Prometheus:
        plain = server.query(f"sum(increase({five}[{WINDOW_S}s]))")
        assert float(plain[0]["value"][1]) == 0.0

        metric = MetricSpec(name="errors", template="error-rate", max=0.01)
        window = run(server.url, BORN, [metric], stable=None, min_samples=3)["errors"]
        assert window.error is None and window.value is not None and window.value > 0.01
        assert an.judge(metric, window).verdict == "Fail"

        async def counted() -> Measurement:
            async with PrometheusSource(server.url, timeout_s=5.0) as source:
                got = await measure(source, NS, ROLLOUT, BORN, None, [metric], interval_s=WINDOW_S,
                                    default_min_samples=3, scrape_interval_s=1.0,
                                    since=time.time() - WINDOW_S)
            return got["errors"]

        m = asyncio.run(counted())
        assert m.evidence is not None and m.evidence.errors == 1.0, m
        server.stop()
