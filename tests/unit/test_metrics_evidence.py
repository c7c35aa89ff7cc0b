"""measure() under the Sequential rule: every query spans the step's evidence period (from when
its weight was reached, plus warmup), and templates with counts return them (one vector query:
a histogram's buckets by ``le``, the error-rate's four counts by ``part``)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from inference_rollout.api.spec import MetricSpec
from inference_rollout.core.types import Evidence, Measurement, MeasurementError
from inference_rollout.metrics.measure import measure
from inference_rollout.metrics.source import MetricQueryError, NoData, Unreachable

CANARY, STABLE = "can111", "sta222"
AT = 1_000_000.0


class CountingSource:
    """Scalar answers by kind; vector answers for evidence queries, by revision."""

    def __init__(self, vectors: dict[str, dict[str, float] | MetricQueryError],
                 value: float = 0.3, samples: float = 7.0) -> None:
        self.vectors, self.value, self.samples = vectors, value, samples
        self.calls: list[str] = []

    async def query(self, promql: str, at: float | None = None) -> float:
        self.calls.append(promql)
        return self.samples if promql.startswith(("sum(increase(", "max(label_")) else self.value

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        self.calls.append(promql)
        rev = CANARY if f"chat-{CANARY}-" in promql else STABLE
        answer = self.vectors.get(rev, NoData("empty vector"))
        if isinstance(answer, MetricQueryError):
            raise answer
        return answer


def run(source: CountingSource, m: MetricSpec, since: float | None) -> Measurement:
    got = asyncio.run(measure(source, "prod", "chat", CANARY, STABLE, [m], interval_s=60,
                              default_min_samples=20, scrape_interval_s=15, at=AT, since=since))
    return got[m.name]


def metric(**kw: Any) -> MetricSpec:
    return MetricSpec.model_validate({"name": "m", "template": "ttft-p99", "max": 0.45, **kw})


BUCKETS = {"0.25": 6.0, "0.5": 6.5, "0.1": 2.0, "+Inf": 7.2}


def test_queries_span_the_step_and_buckets_come_back_cumulative() -> None:
    src = CountingSource({CANARY: BUCKETS})
    m = run(src, metric(), since=AT - 300.5)
    assert m.evidence == Evidence(300, buckets=((0.1, 2.0), (0.25, 6.0), (0.5, 6.5),
                                                (math.inf, 7.2)))
    assert m.error is MeasurementError.TOO_FEW_SAMPLES  # the Window rule's guard, kept for others
    assert all("[300s]" in q for q in src.calls) and len(src.calls) == 3
    assert ('sum by (le) (increase(vllm:time_to_first_token_seconds_bucket{namespace="prod",'
            f'pod=~"chat-{CANARY}-[a-z0-9]+-[a-z0-9]+"}}[300s]))') in src.calls


def test_the_window_rule_sends_no_evidence_query() -> None:
    src = CountingSource({CANARY: BUCKETS})
    m = run(src, metric(), since=None)
    assert m.evidence is None and all("[60s]" in q for q in src.calls) and len(src.calls) == 2


def test_warmup_and_the_first_scrapes_are_inconclusive_without_asking() -> None:
    src = CountingSource({CANARY: BUCKETS})
    m = run(src, metric(warmup="2m"), since=AT - 100)
    assert (m.error, m.detail) == (MeasurementError.TOO_FEW_SAMPLES,
                                   "warming up: evidence counts from 120s after the step's weight "
                                   "and needs 2 scrapes")
    m = run(src, metric(), since=AT - 20)
    assert m.detail.startswith("collecting:") and src.calls == []
    m = run(src, metric(warmup="2m"), since=AT - 200)
    assert m.evidence is not None and m.evidence.period_s == 80


def test_error_counts_take_the_view_with_the_larger_share() -> None:
    parts = {"engine_errors": 1.0, "engine_requests": 100.0, "http_errors": 4.0,
             "http_requests": 101.0}
    m = run(CountingSource({CANARY: parts}),
            MetricSpec(name="e", template="error-rate", max=0.01), since=AT - 60)
    assert m.evidence is not None and (m.evidence.requests, m.evidence.errors) == (101.0, 4.0)
    # vLLM < 0.11 has no error series and no HTTP metrics: 0 errors of the engine's requests
    m = run(CountingSource({CANARY: {"engine_requests": 50.0}}),
            MetricSpec(name="e", template="error-rate", max=0.01), since=AT - 60)
    assert m.evidence is not None and (m.evidence.requests, m.evidence.errors) == (50.0, 0.0)


def test_relative_error_rate_counts_both_sides() -> None:
    src = CountingSource({CANARY: {"engine_requests": 50.0, "engine_errors": 5.0},
                          STABLE: {"engine_requests": 950.0, "engine_errors": 1.0}})
    m = run(src, MetricSpec(name="e", template="error-rate", max_ratio_to_stable=1.5),
            since=AT - 60)
    assert m.evidence is not None
    assert (m.evidence.stable_requests, m.evidence.stable_errors) == (950.0, 1.0)


def test_an_evidence_query_error_is_the_metrics_error_and_no_series_leaves_the_point() -> None:
    m = run(CountingSource({CANARY: Unreachable("refused")}), metric(), since=AT - 60)
    assert (m.error, m.detail) == (MeasurementError.UNREACHABLE, "canary counts: refused")
    m = run(CountingSource({}, samples=100.0), metric(), since=AT - 60)
    assert m.evidence is None and m.error is None and m.value == 0.3


def test_a_relative_latency_metric_counts_only_the_canary() -> None:
    src = CountingSource({CANARY: BUCKETS, STABLE: BUCKETS})
    m = run(src, metric(maxRatioToStable=1.5), since=AT - 60)
    assert m.evidence is not None
    assert sum(q.startswith("sum by (le)") for q in src.calls) == 1  # not the stable's buckets
