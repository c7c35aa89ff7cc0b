"""Verdicts under the Sequential rule: evidence counted over the step decides a metric's ``max``
(latency p99 by exceedances, error rate by errors); other thresholds compare the point estimate
over the same period; the status carries the counts and the test's state."""

from __future__ import annotations

import math
from typing import Any

import pytest
from tests.unit.coresim import T0

from inference_rollout.api.spec import AnalysisSpec, MetricSpec
from inference_rollout.core import sequential as sq
from inference_rollout.core import verdicts as an
from inference_rollout.core.types import Evidence, Measurement, MeasurementError

RATES = sq.error_rates(0.01, metrics=3, steps=4)
BOUNDS = (0.1, 0.25, 0.5, 0.75, 1.0)


def ttft(**kw: Any) -> MetricSpec:
    return MetricSpec.model_validate({"name": "slo-ttft-p99", "template": "ttft-p99",
                                      "max": 0.45, **kw})


def histogram(fast: int, near: int, slow: int, far: int) -> tuple[tuple[float, float], ...]:
    """Cumulative buckets for requests at 0.05 s, 0.3 s (≤ 0.45 but in the 0.25-0.5 bucket),
    0.48 s (over 0.45, same bucket) and 0.9 s (surely over)."""
    lat = [0.05] * fast + [0.3] * near + [0.48] * slow + [0.9] * far
    return tuple((b, float(sum(x <= b for x in lat))) for b in (*BOUNDS, math.inf))


def measured(buckets: tuple[tuple[float, float], ...], period: float = 60.0,
             value: float | None = 0.2, **kw: Any) -> Measurement:
    return Measurement(value, samples=buckets[-1][1], evidence=Evidence(period, buckets=buckets),
                       **kw)


def test_two_requests_both_far_over_the_limit_fail_with_the_count_in_the_text() -> None:
    # the fail side's mixture (issue 30): the second surely-bad request is enough at p0 = 1%
    j = an.judge(ttft(), measured(histogram(0, 0, 0, 2)), RATES)
    assert j.verdict == "Fail"
    assert j.test_text == "2/2 over 0.45 s, p < 0.001: Fail"
    assert an.judge(ttft(), measured(histogram(0, 0, 0, 1)), RATES).verdict == "Inconclusive"


def test_too_few_requests_for_the_window_rule_still_decide_by_evidence() -> None:
    # the sample guard said TooFewSamples (5 < 20): the count-based test decides anyway
    m = measured(histogram(0, 0, 0, 5), error=MeasurementError.TOO_FEW_SAMPLES)
    assert an.judge(ttft(), m, RATES).verdict == "Fail"
    assert an.judge(ttft(), m).verdict == "Inconclusive"  # the Window rule: as before


def test_requests_in_the_limits_bucket_fail_only_when_surely_over_and_block_a_pass() -> None:
    # 0.48 s is over 0.45, but the histogram cannot tell it from 0.3 s: never counted to fail
    assert an.judge(ttft(), measured(histogram(0, 0, 50, 0)), RATES).verdict == "Inconclusive"
    # 300 requests with none over the limit pass; with 10 possibly over (near) they do not yet
    assert an.judge(ttft(), measured(histogram(300, 0, 0, 0)), RATES).verdict == "Pass"
    near = an.judge(ttft(), measured(histogram(290, 10, 0, 0)), RATES)
    assert near.verdict == "Inconclusive"
    assert near.test_text is not None and near.test_text.startswith("≤ 10/300 over 0.45 s")


def test_the_point_comparison_still_decides_the_other_thresholds() -> None:
    both = ttft(maxRatioToStable=1.5)
    healthy = measured(histogram(300, 0, 0, 0), value=0.2, stable_value=0.2)
    assert an.judge(both, healthy, RATES).verdict == "Pass"
    slower = measured(histogram(300, 0, 0, 0), value=0.4, stable_value=0.2)
    assert an.judge(both, slower, RATES).verdict == "Fail"
    undecided = measured(histogram(30, 0, 0, 0), value=0.2, stable_value=0.2)
    assert an.judge(both, undecided, RATES).verdict == "Inconclusive"


def error_rate(**kw: Any) -> MetricSpec:
    return MetricSpec.model_validate({"name": "errors", "template": "error-rate", **kw})


def errors(requests: float, failed: float, **kw: Any) -> Measurement:
    return Measurement(failed / requests if requests else None, samples=requests,
                       evidence=Evidence(100.0, requests=requests, errors=failed, **kw))


@pytest.mark.parametrize(("requests", "failed", "verdict"), [
    # the mixture at p0 = 2%: ½·5ⁿ + ¼·25ⁿ + ¼·47.5ⁿ against 1/α = 1,200 (ln 7.09)
    (3, 3, "Fail"),
    (2, 2, "Inconclusive"),
    (400, 0, "Pass"),
    (400, 40, "Fail"),
    (50, 1, "Inconclusive"),
])
def test_error_rate_tests_errors_against_max(requests: int, failed: int, verdict: str) -> None:
    assert an.judge(error_rate(max=0.02), errors(requests, failed), RATES).verdict == verdict


def test_an_error_rate_of_zero_allowed_is_a_point_comparison() -> None:
    # p0 = 0 has no likelihood ratio: the first error fails, as under the Window rule
    assert an.judge(error_rate(max=0), errors(100, 1), RATES).verdict == "Fail"
    assert an.judge(error_rate(max=0), errors(100, 0), RATES).verdict == "Pass"


def test_a_relative_error_rate_fails_early_on_the_two_sample_test() -> None:
    rel = error_rate(maxRatioToStable=1.5)
    # point estimate below the ratio would pass; 12 of 13 errors on a 5% canary fail it
    m = Measurement(0.12, stable_value=0.5, samples=100, evidence=Evidence(
        60.0, requests=100, errors=12, stable_requests=1900, stable_errors=1))
    j = an.judge(rel, m, RATES)
    assert j.verdict == "Fail" and j.test_text is not None and "12/100 failed" in j.test_text


def test_record_shows_the_evidence() -> None:
    res = an.record(ttft(), None, measured(histogram(40, 0, 0, 0), period=80.0), T0, RATES)
    assert (res.verdict, res.requests, res.bad_requests) == ("Inconclusive", 40, 0)
    assert res.requests_to_verdict == 72  # 112 clean requests pass at β = 1%
    assert res.request_rate == 0.5
    assert res.test == "≤ 0/40 over 0.45 s, p = 1.000: Inconclusive (≥ 72 more requests to pass)"
    assert an.still_needed({"slo-ttft-p99": res}, ["slo-ttft-p99"]) == (
        "slo-ttft-p99 needs ≥ 72 more canary requests (about 2m24s at 0.5/s)")


def test_rates_split_the_false_rollback_rate_and_the_window_rule_has_none() -> None:
    spec = AnalysisSpec.model_validate({
        "prometheus": {"address": "http://p:9090"}, "slo": {"ttftP99": "300ms"},
        "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]})
    rates = an.rates_for(spec, steps=4)
    assert rates is not None and rates.alpha == pytest.approx(0.01 / 8)
    window = spec.model_copy(update={"verdicts": "Window"})
    assert an.rates_for(window, steps=4) is None
