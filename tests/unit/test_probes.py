"""Evidence on demand (spec.analysis.probes; evaluation/probes.py): the API's rules, and probe
samples turned into the counts the verdicts read, judged by the production rule."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from inference_rollout.api.effective import PROBE_ERRORS, PROBE_TTFT
from inference_rollout.api.spec import AnalysisSpec, MetricSpec
from inference_rollout.core import verdicts
from inference_rollout.core.types import MeasurementError
from inference_rollout.evaluation.probes import ProbeSample, measurement

PROM = {"address": "http://prometheus:9090", "scrapeInterval": "1s"}


def analysis(**kw: object) -> AnalysisSpec:
    return AnalysisSpec.model_validate({"interval": "10s", **kw})


def test_probes_imply_their_metrics_and_need_no_prometheus() -> None:
    a = analysis(probes={"ratePerSecond": 1}, slo={"ttftP99": "100ms"}, prometheus=PROM)
    by_name = {m.name: m for m in a.effective_metrics}
    assert by_name[PROBE_ERRORS].template == "probe-error-rate"
    assert by_name[PROBE_ERRORS].max == 0.01
    # the same breach line as slo-ttft-p99: factor × target
    assert by_name[PROBE_TTFT].max == by_name["slo-ttft-p99"].max == 0.15
    alone = analysis(probes={})
    assert [m.name for m in alone.effective_metrics] == [PROBE_ERRORS]
    assert alone.prometheus is None  # probes alone: nothing to query


def test_a_probe_template_without_probes_names_the_field() -> None:
    with pytest.raises(ValidationError, match=r"metrics\[name=p\]: the probe-ttft-p99 template "
                                              r"measures the operator's probes; add "
                                              r"spec\.analysis\.probes"):
        analysis(prometheus=PROM, metrics=[{"name": "p", "template": "probe-ttft-p99",
                                            "max": 0.2}])
    with pytest.raises(ValidationError, match="ratePerSecond"):
        analysis(probes={"ratePerSecond": 50})
    with pytest.raises(ValidationError, match=r"probes\.timeout: 10m is longer than"):
        analysis(probes={"timeout": "10m"})


def test_with_probes_the_sequential_rule_looks_as_often_as_they_can_answer() -> None:
    assert analysis(probes={"ratePerSecond": 1}).look_every_seconds == 5.0  # the 5 s floor
    slow = analysis(probes={"ratePerSecond": 0.125}, interval="1m")
    assert slow.look_every_seconds == 8.0
    assert analysis(probes={"ratePerSecond": 1}, verdicts="Window").look_every_seconds == 10.0


TTFT = MetricSpec(name=PROBE_TTFT, template="probe-ttft-p99", max=0.15)
ERRORS = MetricSpec(name=PROBE_ERRORS, template="probe-error-rate", max=0.01)


def probes(side: str, ttfts: list[float | None], start: float = 100.0,
           every: float = 1.0) -> list[ProbeSample]:
    """One probe per second from ``start``; None: a failed probe."""
    return [ProbeSample(side, start + i * every, t is not None, t, (t or 0.0) + 0.01)  # type: ignore[arg-type]
            for i, t in enumerate(ttfts)]


def test_a_step_counts_only_its_own_complete_probes() -> None:
    samples = (probes("canary", [0.01] * 5, start=90)  # before the step's weight
               + probes("canary", [0.01, 2.0, None, 0.02])  # the step, from 100
               + probes("stable", [0.01, 0.01, 0.01]))
    m = measurement(TTFT, samples, since=100.0, window_s=10, now=104.0, min_samples=20)
    # 100, 101 and 103 answered by 104 (102 failed); the one sent at 103 ends at 103.03
    assert m.samples == 3 and m.evidence is not None
    assert m.evidence.buckets == ((0.15, 2.0), (math.inf, 3.0))
    assert m.value == 2.0 and m.stable_value == 0.01
    e = measurement(ERRORS, samples, since=100.0, window_s=10, now=104.0, min_samples=20)
    assert e.evidence is not None and (e.evidence.requests, e.evidence.errors) == (4.0, 1.0)
    assert (e.evidence.stable_requests, e.evidence.stable_errors) == (3.0, 0.0)
    # in flight at "now" (sent at 103.5, 2 s to answer): not counted yet
    late = [ProbeSample("canary", 103.5, True, 2.0, 2.0)]
    assert measurement(TTFT, late, since=100.0, window_s=10, now=104.0,
                       min_samples=1).error is MeasurementError.TOO_FEW_SAMPLES


def test_the_window_rule_reads_the_last_window_against_min_samples() -> None:
    samples = probes("canary", [0.01] * 30, start=0)
    few = measurement(TTFT, samples, since=None, window_s=10, now=30.5, min_samples=20)
    assert few.error is MeasurementError.TOO_FEW_SAMPLES and few.samples == 9  # sent 21…29
    enough = measurement(TTFT, samples, since=None, window_s=30, now=30.5, min_samples=20)
    assert enough.error is None and enough.samples == 29  # sent 1…29 (0 is before the window)


def judged(metric: MetricSpec, samples: list[ProbeSample]) -> str:
    rates = verdicts.rates_for(analysis(probes={}), 4)
    m = measurement(metric, samples, since=0.0, window_s=10, now=1e6, min_samples=20)
    return verdicts.judge(metric, m, rates).verdict


def test_a_gross_breach_fails_on_the_probes_2nd_or_3rd_answer() -> None:
    """Every probe 2 s to its first token (13× the limit): the production rule fails it within
    3 probes, as it does for the users' requests (docs/metrics.md, the gross alternative)."""
    firsts = [n for n in range(1, 6) if judged(TTFT, probes("canary", [2.0] * n)) == "Fail"]
    assert firsts and firsts[0] <= 3, firsts
    failing = [n for n in range(1, 6) if judged(ERRORS, probes("canary", [None] * n)) == "Fail"]
    assert failing and failing[0] <= 3, failing


def test_healthy_probes_never_fail_and_pass_with_enough_of_them() -> None:
    verdicts_seen = {judged(TTFT, probes("canary", [0.01] * n)) for n in (1, 5, 20)}
    assert "Fail" not in verdicts_seen
    assert judged(TTFT, probes("canary", [0.01] * 400)) == "Pass"
    assert judged(ERRORS, probes("canary", [0.01] * 600)) == "Pass"


def test_the_first_weight_waits_for_the_warmup_probes_and_the_deadline_bounds_it() -> None:
    from tests.unit.coresim import manifest_spec, started

    from inference_rollout.core.types import ProbeCounts

    body = manifest_spec(analysis={"interval": "10s", "probes": {"warmupRequests": 5}},
                         strategy={"steps": [{"weight": 5, "pause": "1m"}, {"weight": 100}],
                                   "progressDeadline": "2m"})
    sim = started(body)
    new = sim.release("m2")
    sim.run(30)  # the canary's pods are Ready; no probe has answered yet
    assert sim.status.canary_weight == 0
    assert "warming canary" in (sim.status.message or "") and "0/5" in sim.status.message
    sim.world.probes = ProbeCounts(new, 8, 2.0, canary_answered=4)
    sim.run(5)
    assert sim.status.canary_weight == 0 and "4/5" in sim.status.message
    sim.world.probes = ProbeCounts(new, 10, 2.5, canary_answered=5)
    sim.run(5)
    assert sim.status.canary_weight == 5  # warm: the first weight
    # a canary that never answers its warmup is rolled back at the progress deadline
    sim2 = started(body)
    sim2.release("m3")
    sim2.run_until(lambda s: s.status.aborted, limit=300)
    assert sim2.status.abort_reason == "WarmupNotDone"
    assert sim2.status.canary_weight == 0
