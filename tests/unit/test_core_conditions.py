"""Table tests of the phase, the conditions and the one-line message derived from the state."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.unit.coresim import T0, manifest_spec, started

from inference_rollout.api import reasons as r
from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.api.status import InferenceRolloutStatus, MetricResult
from inference_rollout.core.conditions import (
    apply_conditions,
    derive_phase,
    set_condition,
    step_message,
)
from inference_rollout.core.timeutil import to_iso
from inference_rollout.core.types import Observation, RevisionState

SPEC = InferenceRolloutSpec.parse(manifest_spec(
    strategy={"steps": [{"weight": 5, "pause": "1h"}, {"weight": 20, "pause": "24h"},
                        {"weight": 50}, {"weight": 100}]}))


def world(stable_ready: int = 4, invalid: tuple[str, ...] = (), generation: int = 3) -> Observation:
    return Observation(generation=generation, template_hash="bbbbbbbbbb", invalid=invalid,
                       revisions={"aaaaaaaaaa": RevisionState(4, stable_ready, stable_ready)})


def status(**kw: Any) -> InferenceRolloutStatus:
    base: dict[str, Any] = {"stable_revision": "aaaaaaaaaa"}
    base.update(kw)
    return InferenceRolloutStatus(**base)


@pytest.mark.parametrize(
    ("st", "w", "phase"),
    [
        (status(), world(), "Healthy"),
        (status(), world(stable_ready=3), "Progressing"),  # the stable is still coming up
        (status(stable_revision=None), world(), "Progressing"),
        (status(canary_revision="bbbbbbbbbb", current_step=0), world(), "Progressing"),
        (status(canary_revision="bbbbbbbbbb", paused_reason=r.PAUSE_REQUESTED), world(), "Paused"),
        (status(canary_revision="bbbbbbbbbb", paused_reason=r.MANUAL_STEP), world(), "Paused"),
        (status(canary_revision="bbbbbbbbbb", paused_reason=r.ERROR_LIMIT), world(), "Paused"),
        (status(canary_revision="bbbbbbbbbb", aborted=True), world(), "Degraded"),
        (status(), world(invalid=("bad",)), "Degraded"),
        # an abort outranks a pause, an invalid release outranks everything
        (status(canary_revision="bbbbbbbbbb", aborted=True, paused_reason=r.PAUSE_REQUESTED),
         world(), "Degraded"),
    ],
)
def test_derive_phase(st: InferenceRolloutStatus, w: Observation, phase: str) -> None:
    assert derive_phase(SPEC, st, w) == phase


def test_last_transition_time_changes_only_with_the_status() -> None:
    st = status()
    set_condition(st, "Paused", "False", "NotPaused", "", T0, 1)
    later = T0 + timedelta(minutes=5)
    set_condition(st, "Paused", "False", "NotPaused", "other text", later, 2)
    (c,) = st.conditions
    assert (c.last_transition_time, c.message, c.observed_generation) == (
        to_iso(T0), "other text", 2)
    set_condition(st, "Paused", "True", r.PAUSE_REQUESTED, "paused", later, 2)
    assert st.conditions[0].last_transition_time == to_iso(later)
    set_condition(st, "Available", "True", r.STABLE_AVAILABLE, "", later, 2)
    assert [c.type for c in st.conditions] == ["Available", "Paused"]  # sorted, one per type


def test_apply_conditions_writes_all_five_and_the_phase() -> None:
    st = status(canary_revision="bbbbbbbbbb", current_step=1, canary_weight=20,
                paused_reason=r.PAUSE_REQUESTED, message="paused (PauseRequested)")
    apply_conditions(SPEC, st, world(generation=7), T0)
    got = {c.type: (c.status, c.reason) for c in st.conditions}
    assert got == {
        "Aborted": ("False", "NotAborted"),
        "Available": ("True", r.STABLE_AVAILABLE),
        "Paused": ("True", r.PAUSE_REQUESTED),
        "Progressing": ("True", r.STEP_WEIGHT_SET),
        "Valid": ("True", r.SPEC_VALID),
    }
    assert st.phase == "Paused" and st.observed_generation == 7
    assert all(c.observed_generation == 7 for c in st.conditions)
    available = next(c for c in st.conditions if c.type == "Available")
    assert available.message == "stable revision aaaaaaaaaa has 4/4 pods ready"


@pytest.mark.parametrize(
    ("kw", "now", "message"),
    [
        ({}, T0, ""),
        ({"current_step": 0, "canary_weight": 0}, T0,
         "step 1/4: 0% → 5% (waiting for canary pods)"),
        ({"current_step": 1, "canary_weight": 5, "step_started_at": None}, T0,
         "step 2/4: 5% → 20% (waiting for canary pods)"),
        ({"current_step": 1, "canary_weight": 20, "step_started_at": to_iso(T0)},
         T0 + timedelta(hours=3, minutes=12), "step 2/4: 20% for 3h12m of 24h"),
        ({"current_step": 0, "canary_weight": 5, "step_started_at": to_iso(T0)},
         T0 + timedelta(seconds=45), "step 1/4: 5% for 45s of 1h"),
        ({"current_step": 2, "canary_weight": 50, "step_started_at": to_iso(T0)},
         T0 + timedelta(seconds=3), "step 3/4: 50% for 3s of no hold"),
        ({"current_step": 0, "canary_weight": 5, "step_started_at": to_iso(T0),
          "analysis": {"errors": MetricResult(value=0.0021, verdict="Pass", threshold="≤ 0.01")}},
         T0 + timedelta(minutes=2), "step 1/4: 5% for 2m of 1h; errors 0.0021 (Pass: ≤ 0.01)"),
    ],
)
def test_step_message(kw: dict[str, Any], now: Any, message: str) -> None:
    assert step_message(SPEC, status(canary_revision="bbbbbbbbbb", **kw), now) == message


def test_messages_through_a_release() -> None:
    """The message a person reads in ``kubectl get ir`` at each stage."""
    body = manifest_spec(strategy={"steps": [{"weight": 20, "pause": "1m"}, {"weight": 100}]})
    sim = started(body)
    stable = sim.stable
    assert sim.status.message == f"revision {stable} serves all traffic"
    new = sim.release("m2")
    sim.world.auto_ready = False
    sim.reconcile()
    assert sim.status.message == "step 1/2: 0% → 20% (waiting for canary pods)"
    sim.world.set_ready(new, 1)
    sim.advance(2)
    sim.reconcile()
    sim.advance(1)
    sim.reconcile()
    assert sim.status.message == "step 1/2: 20% for 1s of 1m; errors 0.005 (Pass: ≤ 0.01)"
    sim.reconcile(pause=True)
    assert sim.status.message == (
        "paused (PauseRequested); step 1/2: 20% for 1s of 1m; errors 0.005 (Pass: ≤ 0.01)")
    sim.advance(5)
    sim.verdicts = "fail"
    sim.reconcile(resume=True)
    sim.advance(10)
    sim.reconcile()
    assert sim.status.message == "rolled back: errors 1.02 (Fail: ≤ 0.01)"
    aborted = next(c for c in sim.status.conditions if c.type == "Aborted")
    assert (aborted.status, aborted.reason, aborted.message) == (
        "True", r.ANALYSIS_FAILED, sim.status.message)
    sim.advance(60)
    sim.reconcile()
    assert sim.status.message == "rolled back: errors 1.02 (Fail: ≤ 0.01)"  # kept, not rebuilt


def test_conditions_keep_their_transition_times_through_a_release() -> None:
    sim = started(manifest_spec(strategy={"steps": [{"weight": 20, "pause": "1h"},
                                                    {"weight": 100}]}))
    sim.release("m2")
    sim.run(30)
    times = {c.type: c.last_transition_time for c in sim.status.conditions}
    sim.run(120)
    assert {c.type: c.last_transition_time for c in sim.status.conditions} == times
    sim.reconcile(pause=True)
    after = {c.type: c.last_transition_time for c in sim.status.conditions}
    assert after["Paused"] == to_iso(sim.now)
    assert {k: v for k, v in after.items() if k != "Paused"} == {
        k: v for k, v in times.items() if k != "Paused"}
