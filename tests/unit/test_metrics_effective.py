"""effective_metrics(): explicit metrics plus the ones the SLO implies (api.effective)."""

from __future__ import annotations

from inference_rollout.api.effective import effective_metrics
from inference_rollout.api.spec import AnalysisSpec

PROM = {"address": "http://prometheus:9090"}


def analysis(**kw: object) -> AnalysisSpec:
    return AnalysisSpec.model_validate({"prometheus": PROM, **kw})


def test_slo_targets_become_p99_metrics_with_factor() -> None:
    got = effective_metrics(analysis(slo={"ttftP99": "300ms", "e2eP99": "10s"}))
    assert [(m.name, m.template, m.max) for m in got] == [
        ("slo-ttft-p99", "ttft-p99", 0.45),
        ("slo-e2e-p99", "e2e-p99", 15.0),
    ]
    assert all(m.window is None and m.min_samples is None for m in got)


def test_custom_factor() -> None:
    got = effective_metrics(analysis(slo={"itlP99": "50ms", "factor": 2}))
    assert [(m.name, m.max) for m in got] == [("slo-itl-p99", 0.1)]


def test_explicit_metrics_first_and_a_same_named_one_replaces_the_implied() -> None:
    mine = {"name": "slo-ttft-p99", "template": "ttft-p99", "max": 0.3, "window": "5m"}
    other = {"name": "ttft-vs-stable", "template": "ttft-p99", "maxRatioToStable": 1.2}
    got = effective_metrics(analysis(slo={"ttftP99": "1s"}, metrics=[other, mine]))
    assert [(m.name, m.max) for m in got] == [("ttft-vs-stable", None), ("slo-ttft-p99", 0.3)]


def test_no_slo_no_extra_metrics() -> None:
    assert effective_metrics(analysis()) == []
