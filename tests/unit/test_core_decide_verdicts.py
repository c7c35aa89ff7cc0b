"""Steps that end on evidence (Sequential rule) and the bound on Inconclusive, driven through
:func:`decide` with a world whose canary receives requests at a set rate."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.coresim import Sim, manifest_spec, started

from inference_rollout.api import reasons as r
from inference_rollout.api.duration import parse_duration
from inference_rollout.core.timeutil import from_iso, seconds_since
from inference_rollout.core.types import Evidence, Measurement, RecordEvent


@dataclass
class CountingSim(Sim):
    """The canary gets ``rate`` requests per second, ``bad_share`` of them failing; measurements
    count them since the step's weight was reached, as Prometheus' increase() would."""

    rate: float = 1.0
    bad_share: float = 0.0

    def measure(self) -> dict[str, Measurement]:
        started_at = from_iso(self.status.step_started_at)
        period = 0.0 if started_at is None else (self.now - started_at).total_seconds()
        requests = float(math.floor(self.rate * period))
        errors = float(math.floor(requests * self.bad_share))
        return {"errors": Measurement(errors / requests if requests else None, samples=requests,
                                      evidence=Evidence(period, requests=requests, errors=errors))}


def body(**analysis: Any) -> dict[str, Any]:
    return manifest_spec(
        strategy={"steps": [{"weight": 5, "pause": "0s"}, {"weight": 100}]},
        analysis={"interval": "10s", "prometheus": {"address": "http://prom:9090"},
                  "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}],
                  **analysis})


def releasing(rate: float, bad_share: float = 0.0, **analysis: Any) -> CountingSim:
    base = started(body(**analysis))
    sim = CountingSim(base.body, world=base.world, status=base.status, generation=base.generation,
                      rate=rate, bad_share=bad_share)
    sim.release("m2")
    return sim


def events(sim: Sim, reason: str) -> list[RecordEvent]:
    return [a for d in sim.decisions for a in d.actions
            if isinstance(a, RecordEvent) and a.reason == reason]


def test_pause_0s_completes_a_step_as_soon_as_the_evidence_passes() -> None:
    sim = releasing(rate=5.0)
    sim.run_until(lambda s: s.status.current_step == 1, limit=600)
    first_pass = next(d for d in sim.decisions if d.status.analysis.get("errors")
                      and d.status.analysis["errors"].verdict == "Pass")
    res = first_pass.status.analysis["errors"]
    # β = 1%: ln(100) / ln(0.99/0.95) = 111.7 clean requests show ≤ 1% errors against 5%;
    # measured every 10 s at 5 req/s, the first look past 112 passes and the step ends
    assert res.requests is not None and 112 <= res.requests < 112 + 50
    assert sim.status.current_step == 1
    assert res.test is not None and res.test.endswith(": Pass")


def test_each_step_asks_for_the_share_of_the_release_evidence_its_weight_hands_on() -> None:
    """Issue 30, item 3: through 5 → 20 → 100 the canary is one revision, so the clean requests
    of the whole release count: the 5 % step hands on 20 % (a fifth of the 112 clean requests
    β asks for), the 20 % step hands on all traffic (the release's 112), the last step its own
    minimum of 2 (each step before: 112 requests)."""
    base = started(manifest_spec(
        strategy={"steps": [{"weight": 5, "pause": "0s"}, {"weight": 20, "pause": "0s"},
                            {"weight": 100}]},
        analysis={"interval": "10s", "prometheus": {"address": "http://prom:9090"},
                  "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}]}))
    sim = CountingSim(base.body, world=base.world, status=base.status,
                      generation=base.generation, rate=1.0)
    sim.release("m2")
    passes: dict[int, Any] = {}
    seen = None
    for _ in range(2000):
        step = sim.status.current_step
        sim.reconcile()
        res = sim.status.analysis.get("errors")
        if res is not None and res.measured_at != seen:  # a look in this reconcile
            seen = res.measured_at
            if res.verdict == "Pass" and step is not None:
                passes.setdefault(step, res)  # the step's first Pass (pause 0s: it moves on)
        if sim.status.canary_revision is None:
            break
        sim.advance(1.0)
    assert sim.status.canary_revision is None and not sim.status.aborted  # promoted
    first, second, last = passes[0], passes[1], passes[2]
    assert first.carried is None and 23 <= first.requests < 23 + 10  # ⌈0.2 × 111.7⌉
    assert second.carried is not None and second.carried.requests == first.requests
    assert second.carried.requests + second.requests >= 112 > second.carried.requests + 70
    assert "this release" in (second.test or "")
    assert last.carried is not None and last.carried.requests >= 112


def test_a_canary_failing_every_request_is_rolled_back_after_a_handful() -> None:
    sim = releasing(rate=0.2, bad_share=1.0)
    sim.run_until(lambda s: s.status.aborted, limit=600)
    res = sim.status.analysis["errors"]
    assert sim.status.abort_reason == r.ANALYSIS_FAILED
    # 1 metric × 2 steps: α = 0.5%, so 2 failed requests are enough: the mixture's gross
    # alternatives (issue 30) give ¼·95² + ¼·50² + ½·5² ≈ 2,893 ≥ 1/α = 200 (5·p0 alone: 4)
    assert (res.requests, res.bad_requests) == (2, 2)
    assert sim.status.message == "rolled back: errors 1 (Fail: ≤ 0.01; 2/2 failed, p < 0.001: Fail)"


def test_an_undecided_step_pauses_at_its_limit_with_what_a_verdict_needs() -> None:
    sim = releasing(rate=0.05, inconclusiveLimit="5m")
    sim.run_until(lambda s: s.status.paused_reason is not None, limit=900)
    st = sim.status
    assert st.paused_reason == r.INCONCLUSIVE_LIMIT and st.phase == "Paused"
    started_at = from_iso(st.step_started_at)
    assert started_at is not None and (sim.now - started_at).total_seconds() >= 300
    (event,) = events(sim, r.INCONCLUSIVE_LIMIT)
    assert event.type == "Warning"
    assert re.search(r"errors needs ≥ \d+ more canary requests \(about \d+m\d*s? at 0\.0\d+/s\)",
                     event.message), event.message
    assert (st.current_step, st.canary_weight) == (0, 5)
    # traffic picks up: the evidence passes, the pause lifts itself and the step completes
    sim.rate = 20.0
    sim.run_until(lambda s: s.status.current_step == 1, limit=600)
    assert len(events(sim, r.INCONCLUSIVE_RESOLVED)) == 1
    assert len(events(sim, r.INCONCLUSIVE_LIMIT)) == 1


def test_an_undecided_step_rolls_back_at_its_limit_when_asked_to() -> None:
    sim = releasing(rate=0.05, inconclusiveLimit="5m", onInconclusive="Rollback")
    sim.run_until(lambda s: s.status.aborted, limit=900)
    assert sim.status.abort_reason == r.INCONCLUSIVE_LIMIT
    assert sim.status.canary_weight == 0
    assert sim.status.message.startswith("rolled back: the analysis was still undecided 5m")


def test_without_a_limit_an_undecided_step_waits() -> None:
    sim = releasing(rate=0.05)
    sim.run(1800)
    assert sim.status.paused_reason is None and not sim.status.aborted
    assert sim.status.analysis["errors"].verdict == "Inconclusive"


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "100")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0.02, 0.3, 2.0, 20.0]), st.sampled_from([0.0, 0.005, 0.03, 1.0]),
       st.sampled_from([None, "2m", "10m"]), st.sampled_from(["Pause", "Rollback"]),
       st.lists(st.sampled_from(["0s", "30s", "3m"]), min_size=2, max_size=2),
       st.lists(st.floats(0.5, 120), min_size=30, max_size=200))
def test_steps_end_only_on_a_pass_and_the_limit_acts_only_after_it(
        rate: float, bad_share: float, limit: str | None, action: str, pauses: list[str],
        waits: list[float]) -> None:
    extra: dict[str, Any] = {}
    if limit is not None:
        extra = {"inconclusiveLimit": limit, "onInconclusive": action}
    base = started(manifest_spec(
        strategy={"steps": [{"weight": 5, "pause": pauses[0]}, {"weight": 30, "pause": pauses[1]},
                            {"weight": 100}]},
        analysis={"interval": "10s", "prometheus": {"address": "http://prom:9090"},
                  "metrics": [{"name": "errors", "template": "error-rate", "max": 0.01}],
                  **extra}))
    sim = CountingSim(base.body, world=base.world, status=base.status, generation=base.generation,
                      rate=rate, bad_share=bad_share)
    sim.release("m2")
    for wait in waits:
        before = sim.status
        d = sim.reconcile()
        reasons = [a.reason for a in d.actions if isinstance(a, RecordEvent)]
        if r.STEP_COMPLETE in reasons:  # on the verdict recorded in this very call
            res = d.status.analysis.get("errors")
            assert res is not None and res.verdict == "Pass", (reasons, res)
        if r.INCONCLUSIVE_LIMIT in reasons:  # the pause's and the rollback's reason
            held = seconds_since(before.step_started_at, sim.now)
            assert limit is not None and held is not None and held >= parse_duration(limit)
        if bad_share == 1.0:
            assert r.PROMOTED not in reasons
        if sim.status.aborted or sim.status.canary_revision is None:
            break
        sim.advance(wait)
