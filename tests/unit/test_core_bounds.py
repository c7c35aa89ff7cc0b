"""The longest durations the API accepts go through the decision core: ``pause:
300000000000s`` once overflowed a datetime in every reconcile; the bound (365d, api/duration.py)
must leave every accepted value computable, also summed with the current time."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError
from tests.unit.coresim import Sim, manifest_spec

from inference_rollout.api.duration import MAX_DURATION
from inference_rollout.api.spec import InferenceRolloutSpec

LONGEST = {"progressDeadline": MAX_DURATION, "abortScaleDownDelay": MAX_DURATION,
           "scaleDownDelay": MAX_DURATION,
           "steps": [{"weight": 5, "pause": MAX_DURATION}, {"weight": 100}]}


def test_a_release_with_the_longest_durations_is_decided_without_overflow() -> None:
    sim = Sim(manifest_spec(strategy=LONGEST))
    sim.run(30)
    stable = sim.stable
    sim.release("m2")
    for d in sim.run(120):
        assert d.requeue_after is None or math.isfinite(d.requeue_after)
    assert sim.canary is not None and sim.stable == stable
    assert sim.status.canary_weight == 5  # holding the 365-day pause
    sim.verdicts = "fail"
    sim.run(30)  # a rollback waits abortScaleDownDelay (365d) to scale down
    assert sim.status.aborted and sim.status.canary_weight == 0


@pytest.mark.parametrize("pause", ["300000000000s", "366d", "8761h"])
def test_a_longer_pause_never_reaches_the_core(pause: str) -> None:
    body = manifest_spec(strategy={"steps": [{"weight": 5, "pause": pause}, {"weight": 100}]})
    with pytest.raises(ValidationError, match=r"steps\.0\.pause"):
        InferenceRolloutSpec.parse(body)
