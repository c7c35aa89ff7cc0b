"""Table tests of the analysis rules: a verdict per measurement, counters, limits, the SLO rule."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.unit.coresim import T0

from inference_rollout.api.effective import effective_metrics, slo_metrics
from inference_rollout.api.spec import AnalysisSpec, MetricSpec, SloSpec
from inference_rollout.api.status import MetricResult
from inference_rollout.core import verdicts as an
from inference_rollout.core.types import Measurement, MeasurementError

E = MeasurementError


def metric(**thresholds: Any) -> MetricSpec:
    return MetricSpec(name="m", query="q{{revision}}", **thresholds)


def m(value: float | None, stable: float | None = None, samples: float | None = 100,
      error: MeasurementError | None = None) -> Measurement:
    return Measurement(value, stable_value=stable, samples=samples, error=error)


@pytest.mark.parametrize(
    ("thresholds", "measurement", "verdict"),
    [
        # absolute max: equal to the threshold passes, above fails
        ({"max": 0.01}, m(0.0), "Pass"),
        ({"max": 0.01}, m(0.01), "Pass"),
        ({"max": 0.01}, m(0.0100001), "Fail"),
        ({"max": 0.0}, m(0.0), "Pass"),
        ({"max": 0.0}, m(1e-9), "Fail"),
        # absolute min
        ({"min": 0.5}, m(0.5), "Pass"),
        ({"min": 0.5}, m(0.49), "Fail"),
        ({"min": 0.5}, m(2.0), "Pass"),
        # a band: both ends apply
        ({"min": 1, "max": 2}, m(1.5), "Pass"),
        ({"min": 1, "max": 2}, m(0.5), "Fail"),
        ({"min": 1, "max": 2}, m(2.5), "Fail"),
        # relative to stable (the business metric that must not drop 5%)
        ({"minRatioToStable": 0.95}, m(0.95, stable=1.0), "Pass"),
        ({"minRatioToStable": 0.95}, m(0.94, stable=1.0), "Fail"),
        ({"minRatioToStable": 0.95}, m(2.0, stable=1.0), "Pass"),
        ({"maxRatioToStable": 1.2}, m(1.2, stable=1.0), "Pass"),
        ({"maxRatioToStable": 1.2}, m(1.3, stable=1.0), "Fail"),
        ({"maxRatioToStable": 1.2}, m(0.1, stable=1.0), "Pass"),
        ({"maxRatioToStable": 1.2, "minRatioToStable": 0.8}, m(0.7, stable=1.0), "Fail"),
        # stable 0: equal zeros pass, anything else is undecidable (never Pass, never Fail)
        ({"maxRatioToStable": 1.2}, m(0.0, stable=0.0), "Pass"),
        ({"maxRatioToStable": 1.2}, m(0.3, stable=0.0), "Inconclusive"),
        ({"minRatioToStable": 0.95}, m(0.3, stable=0.0), "Inconclusive"),
        # stable off the scale (+Inf p99: slower than the largest bucket): no ratio means
        # anything, so never Pass (+Inf vs +Inf, 5 vs +Inf); a canary at +Inf still fails
        ({"maxRatioToStable": 1.2}, m(float("inf"), stable=float("inf")), "Inconclusive"),
        ({"maxRatioToStable": 1.2}, m(5.0, stable=float("inf")), "Inconclusive"),
        ({"minRatioToStable": 0.95}, m(5.0, stable=float("inf")), "Inconclusive"),
        ({"maxRatioToStable": 1.2}, m(float("inf"), stable=5.0), "Fail"),
        # a relative check with no stable value cannot be judged
        ({"minRatioToStable": 0.95}, m(1.0, stable=None), "Error"),
        # an absolute breach still fails even when the ratio cannot be judged
        ({"max": 1.0, "maxRatioToStable": 2}, m(5.0, stable=None), "Error"),
        # errors never pass: no data, unreachable, bad query, a missing value
        ({"max": 0.01}, m(None, error=E.NO_DATA), "Error"),
        ({"max": 0.01}, m(None, error=E.UNREACHABLE), "Error"),
        ({"max": 0.01}, m(None, error=E.BAD_QUERY), "Error"),
        ({"max": 0.01}, m(None), "Error"),
        ({"max": 0.01}, m(0.0, error=E.UNREACHABLE), "Error"),
        # too few samples (a 5% stage sees little traffic) is inconclusive, not pass
        ({"max": 0.01}, m(None, samples=3, error=E.TOO_FEW_SAMPLES), "Inconclusive"),
        ({"max": 0.01}, m(0.0, samples=3, error=E.TOO_FEW_SAMPLES), "Inconclusive"),
        ({"max": 0.01}, m(9.0, samples=3, error=E.TOO_FEW_SAMPLES), "Inconclusive"),
    ],
)
def test_judge(thresholds: dict[str, float], measurement: Measurement, verdict: str) -> None:
    assert an.judge(metric(**thresholds), measurement).verdict == verdict


@pytest.mark.parametrize(
    ("thresholds", "measurement", "why"),
    [
        ({"max": 0.01}, m(0.02), "0.02 > 0.01"),
        ({"min": 0.5}, m(0.25), "0.25 < 0.5"),
        ({"minRatioToStable": 0.95}, m(0.9, stable=1.0), "0.900× stable < 0.95×"),
        ({"max": 0.01}, m(0.002), "0.002 ≤ 0.01"),
        ({"max": 0.01}, m(None, samples=3, error=E.TOO_FEW_SAMPLES), "too few samples (3)"),
        ({"max": 0.01}, Measurement(None, error=E.UNREACHABLE, detail="timeout"),
         "Unreachable: timeout"),
        ({"max": 0.01}, m(None), "NoData"),
    ],
)
def test_judge_explains(thresholds: dict[str, float], measurement: Measurement, why: str) -> None:
    assert an.judge(metric(**thresholds), measurement).why == why


@pytest.mark.parametrize(
    ("thresholds", "text"),
    [
        ({"max": 0.01}, "≤ 0.01"),
        ({"min": 0.5}, "≥ 0.5"),
        ({"min": 1, "max": 2}, "≤ 2, ≥ 1"),
        ({"maxRatioToStable": 1.2}, "≤ 1.2× stable"),
        ({"minRatioToStable": 0.95}, "≥ 0.95× stable"),
    ],
)
def test_describe_threshold(thresholds: dict[str, float], text: str) -> None:
    assert an.describe_threshold(metric(**thresholds)) == text


# --- counters --------------------------------------------------------------------------------

PASS, FAIL = m(0.001), m(0.5)
ERR, FEW = m(None, error=E.UNREACHABLE), m(None, samples=1, error=E.TOO_FEW_SAMPLES)


@pytest.mark.parametrize(
    ("sequence", "failures", "errors", "passes"),
    [
        ([PASS], 0, 0, 1),
        ([FAIL], 1, 0, 0),
        ([FAIL, FAIL, FAIL], 3, 0, 0),
        ([FAIL, PASS], 0, 0, 1),
        ([FAIL, ERR], 0, 1, 0),  # an error breaks a run of failures: "consecutive" means so
        ([FAIL, FEW, FAIL], 1, 0, 0),
        ([ERR, ERR, ERR], 0, 3, 0),
        ([ERR, ERR, PASS], 0, 0, 1),
        ([ERR, FEW], 0, 0, 0),  # inconclusive is not an error: it resets the error run
        ([ERR, FAIL], 1, 0, 0),
        ([PASS, PASS, FEW, PASS], 0, 0, 3),  # passes count in total, not in a row
        ([PASS, FAIL, PASS], 0, 0, 2),
    ],
)
def test_record_counters(sequence: list[Measurement], failures: int, errors: int,
                         passes: int) -> None:
    spec = metric(max=0.01)
    result: MetricResult | None = None
    for i, measurement in enumerate(sequence):
        result = an.record(spec, result, measurement, T0 + timedelta(seconds=10 * i))
    assert result is not None
    assert (result.consecutive_failures, result.consecutive_errors, result.passes) == (
        failures, errors, passes)
    assert result.measured_at == f"2026-12-01T12:00:{10 * (len(sequence) - 1):02d}.000Z"


def test_record_keeps_values_threshold_and_error_text() -> None:
    r = an.record(metric(minRatioToStable=0.95), None, m(0.9, stable=1.0, samples=250), T0)
    assert (r.value, r.stable_value, r.samples, r.verdict, r.error) == (0.9, 1.0, 250, "Fail", None)
    assert r.threshold == "≥ 0.95× stable"
    r = an.record(metric(max=1), r, Measurement(None, error=E.NO_DATA, detail="empty"), T0)
    assert (r.verdict, r.error, r.value) == ("Error", "NoData: empty", None)
    r = an.record(metric(max=1), r, m(None, samples=2, error=E.TOO_FEW_SAMPLES), T0)
    assert (r.verdict, r.error) == ("Inconclusive", "too few samples (2)")


@pytest.mark.parametrize(
    ("failure_limit", "consecutive", "rolls_back"),
    [(0, 0, False), (0, 1, True), (1, 1, False), (1, 2, True), (2, 2, False), (2, 3, True)],
)
def test_failure_limit(failure_limit: int, consecutive: int, rolls_back: bool) -> None:
    analysis = AnalysisSpec(failure_limit=failure_limit)
    results = {"a": MetricResult(consecutive_failures=consecutive), "b": MetricResult()}
    assert an.failed(analysis, results) == (["a"] if rolls_back else [])


@pytest.mark.parametrize(
    ("limit", "consecutive", "stuck"),
    [(1, 0, False), (1, 1, True), (4, 3, False), (4, 4, True), (4, 5, True)],
)
def test_consecutive_error_limit(limit: int, consecutive: int, stuck: bool) -> None:
    analysis = AnalysisSpec(consecutive_error_limit=limit)
    results = {"a": MetricResult(consecutive_errors=consecutive), "b": MetricResult()}
    assert an.erroring(analysis, results) == (["a"] if stuck else [])


# --- the SLO rule: breach when p99 > factor × SLA --------------------------------------------


@pytest.mark.parametrize(
    ("slo", "expected"),
    [
        ({"ttftP99": "300ms"}, {"slo-ttft-p99": 0.45}),  # the default factor is 1.5
        ({"ttftP99": "300ms", "itlP99": "50ms", "e2eP99": "20s"},
         {"slo-ttft-p99": 0.45, "slo-itl-p99": 0.075, "slo-e2e-p99": 30.0}),
        ({"itlP99": "40ms", "factor": 1.0}, {"slo-itl-p99": 0.04}),
        ({"e2eP99": "1m", "factor": 2}, {"slo-e2e-p99": 120.0}),
        ({}, {}),
    ],
)
def test_slo_metrics(slo: dict[str, Any], expected: dict[str, float]) -> None:
    implied = slo_metrics(SloSpec.model_validate(slo))
    assert {x.name: x.max for x in implied} == expected
    for x in implied:
        assert x.template == x.name.removeprefix("slo-")


@pytest.mark.parametrize(
    ("value", "verdict"), [(0.30, "Pass"), (0.45, "Pass"), (0.4501, "Fail"), (0.9, "Fail")])
def test_slo_breach_is_above_factor_times_sla(value: float, verdict: str) -> None:
    (ttft,) = slo_metrics(SloSpec(ttft_p99="300ms"))
    assert an.judge(ttft, m(value)).verdict == verdict


def test_effective_metrics_explicit_first_and_explicit_name_wins() -> None:
    analysis = AnalysisSpec.model_validate({
        "prometheus": {"address": "http://p:9090"},
        "slo": {"ttftP99": "300ms", "itlP99": "50ms"},
        "metrics": [
            {"name": "error-rate", "template": "error-rate", "max": 0.01},
            {"name": "slo-itl-p99", "template": "itl-p99", "max": 0.1},
            {"name": "ttft-vs-stable", "template": "ttft-p99", "maxRatioToStable": 1.1},
        ],
    })
    got = [(x.name, x.max) for x in effective_metrics(analysis)]
    assert got == [("error-rate", 0.01), ("slo-itl-p99", 0.1), ("ttft-vs-stable", None),
                   ("slo-ttft-p99", 0.45)]
    assert an.effective_metrics is effective_metrics  # core and metrics share one list


def test_summarise() -> None:
    results = {
        "errors": MetricResult(value=0.0021234, verdict="Pass", threshold="≤ 0.01"),
        "ttft": MetricResult(value=None, verdict="Error", threshold="≤ 0.45"),
    }
    assert an.summarise(results, ["errors", "missing", "ttft"]) == (
        "errors 0.002123 (Pass: ≤ 0.01); ttft n/a (Error: ≤ 0.45)")
