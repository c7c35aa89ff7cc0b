"""measure(): how query outcomes combine into one Measurement per metric.

The source here is an in-memory fake (a dict from "which revision, which query" to an outcome):
what is tested is the combination logic, not PromQL, which the integration tests prove against
a real Prometheus.
"""

from __future__ import annotations

import asyncio
from typing import Any

from inference_rollout.api.spec import MetricSpec
from inference_rollout.core.types import Measurement, MeasurementError
from inference_rollout.metrics.measure import measure
from inference_rollout.metrics.source import BadQuery, MetricQueryError, NoData, Unreachable

CANARY, STABLE = "can111", "sta222"
Outcome = float | MetricQueryError


class FakeSource:
    """Answers by (revision, kind): kind "samples" for a request-count query, else "value"."""

    def __init__(self, answers: dict[tuple[str, str], Outcome]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, float | None]] = []

    async def query(self, promql: str, at: float | None = None) -> float:
        self.calls.append((promql, at))
        rev = CANARY if f"chat-{CANARY}-" in promql else STABLE
        samples = promql.startswith(("sum(increase(", "max(label_replace(sum(increase("))
        kind = "samples" if samples else "value"
        answer = self.answers.get((rev, kind), NoData("empty vector"))
        if isinstance(answer, MetricQueryError):
            raise answer
        return answer

    async def query_vector(self, promql: str, label: str, at: float | None = None
                           ) -> dict[str, float]:
        raise AssertionError(f"unexpected vector query {promql}")


def metric(**kw: Any) -> MetricSpec:
    return MetricSpec.model_validate({"name": "m", "template": "ttft-p99", **kw})


def run(answers: dict[tuple[str, str], Outcome], m: MetricSpec, *, stable: str | None = STABLE,
        min_samples: int = 20) -> tuple[Measurement, FakeSource]:
    source = FakeSource(answers)
    got = asyncio.run(measure(source, "prod", "chat", CANARY, stable, [m], interval_s=60,
                              default_min_samples=min_samples, scrape_interval_s=15, at=1e9))
    return got[m.name], source


HEALTHY: dict[tuple[str, str], Outcome] = {
    (CANARY, "value"): 0.3, (CANARY, "samples"): 100.0,
    (STABLE, "value"): 0.2, (STABLE, "samples"): 900.0}


def test_absolute_metric_measures_only_the_canary() -> None:
    m, src = run(HEALTHY, metric(max=1))
    assert m == Measurement(0.3, None, 100.0, None, "window 60s")
    assert len(src.calls) == 2  # value + samples, no stable queries


def test_relative_metric_measures_both_at_the_same_instant() -> None:
    m, src = run(HEALTHY, metric(maxRatioToStable=1.2))
    assert (m.value, m.stable_value, m.samples, m.error) == (0.3, 0.2, 100.0, None)
    assert len(src.calls) == 4 and {at for _, at in src.calls} == {1e9}


def test_quiet_window_is_too_few_samples_with_the_value() -> None:
    m, _ = run({**HEALTHY, (CANARY, "samples"): 7.0}, metric(max=1))
    assert (m.error, m.value, m.samples) == (MeasurementError.TOO_FEW_SAMPLES, 0.3, 7.0)
    assert m.detail == "canary: 7 requests in 60s < minSamples 20"


def test_no_traffic_at_all_is_too_few_samples_not_no_data() -> None:
    # Series exist but nothing moved: the quantile is NaN (NoData), the count is 0.
    m, _ = run({(CANARY, "value"): NoData("NaN"), (CANARY, "samples"): 0.0}, metric(max=1))
    assert (m.error, m.value, m.samples) == (MeasurementError.TOO_FEW_SAMPLES, None, 0.0)


def test_revision_without_series_is_no_data() -> None:
    m, _ = run({}, metric(max=1))
    assert m.error is MeasurementError.NO_DATA and m.detail.startswith("canary:")


def test_relative_samples_are_the_quieter_side() -> None:
    m, _ = run({**HEALTHY, (STABLE, "samples"): 5.0}, metric(maxRatioToStable=1.2))
    assert (m.error, m.samples) == (MeasurementError.TOO_FEW_SAMPLES, 5.0)
    assert m.detail.startswith("stable:")


def test_missing_stable_series_is_no_data() -> None:
    answers = {k: v for k, v in HEALTHY.items() if k[0] == CANARY}
    m, _ = run(answers, metric(maxRatioToStable=1.2))
    assert (m.error, m.value) == (MeasurementError.NO_DATA, 0.3)
    assert m.detail.startswith("stable:")


def test_relative_metric_without_a_stable_revision_is_no_data() -> None:
    m, src = run(HEALTHY, metric(maxRatioToStable=1.2), stable=None)
    assert m.error is MeasurementError.NO_DATA and src.calls == []


def test_errors_win_over_everything() -> None:
    m, _ = run({**HEALTHY, (STABLE, "value"): Unreachable("refused")}, metric(minRatioToStable=1))
    assert m == Measurement(None, error=MeasurementError.UNREACHABLE, detail="stable: refused")
    m, _ = run({**HEALTHY, (CANARY, "samples"): BadQuery("parse error")}, metric(max=1))
    assert (m.error, m.detail) == (MeasurementError.BAD_QUERY, "canary: parse error")


def test_min_samples_zero_skips_the_guard() -> None:
    m, src = run(HEALTHY, metric(max=1, minSamples=0))
    assert (m.error, m.samples, len(src.calls)) == (None, None, 1)


def test_unknown_placeholder_is_bad_query_without_asking_prometheus() -> None:
    m, src = run(HEALTHY, MetricSpec(name="m", query="sum(x{a=\"{{nope}}\"})", max=1))
    assert m.error is MeasurementError.BAD_QUERY and "{{nope}}" in m.detail
    assert src.calls == []


def test_metrics_come_back_in_spec_order_and_queries_run_concurrently() -> None:
    started: list[str] = []
    release = asyncio.Event()

    class Gate(FakeSource):
        async def query(self, promql: str, at: float | None = None) -> float:
            started.append(promql)
            if len(started) == 4:
                release.set()
            await release.wait()  # deadlocks unless all four are in flight together
            return 1.0

    specs = [metric(name=n, max=1, minSamples=0) for n in ("b", "a", "d", "c")]

    async def go() -> dict[str, Measurement]:
        return await asyncio.wait_for(
            measure(Gate({}), "prod", "chat", CANARY, STABLE, specs, 60, 20), timeout=5
        )

    assert list(asyncio.run(go())) == ["b", "a", "d", "c"]
