"""A drill's result is the operator's to tell (issue 29: the CLI is a client, forbidden the
notifier): the drill leaves it on the rollout, and ``decide`` records it as one Event -- and so
one ``Drill`` notice -- per drill id, remembered in ``status.drillRecorded``. The annotation's
parsing (anyone who may annotate the rollout can write it) is the reconciler's ``last_drill``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.unit.coresim import Sim, manifest_spec

from inference_rollout.api import ANN_LAST_DRILL
from inference_rollout.api import reasons as r
from inference_rollout.core.decide import decide
from inference_rollout.core.notices import notices
from inference_rollout.core.types import Decision, DrillResult, Observation, RecordEvent
from inference_rollout.reconciler import last_drill

ID = "0c5e" + "0" * 28


def healthy() -> Sim:
    sim = Sim(manifest_spec())
    sim.reconcile()
    sim.reconcile()
    assert sim.status.phase == "Healthy"
    return sim


def with_drill(sim: Sim, drill: DrillResult | None) -> Decision:
    obs = Observation(generation=sim.generation, template_hash=sim.stable or "",
                      revisions=dict(sim.world.deployments),
                      route=dict(sim.world.route or {}), rollout="chat", drill=drill)
    d = decide(sim.spec, sim.status, obs, sim.now)
    sim.status = d.status
    return d


def events(d: Decision) -> list[tuple[str, str, str]]:
    return [(a.type, a.reason, a.message) for a in d.actions if isinstance(a, RecordEvent)]


def test_a_drill_result_is_one_event_and_one_notice_once() -> None:
    sim = healthy()
    before = sim.status
    d = with_drill(sim, DrillResult(ID, True, "drill pod-kill: pass"))
    assert events(d) == [("Normal", r.DRILL_PASSED, "drill pod-kill: pass")]
    assert d.status.drill_recorded == ID
    (notice,) = notices(before, d)
    assert (notice.kind, notice.reason, notice.message) == ("Drill", r.DRILL_PASSED,
                                                            "drill pod-kill: pass")
    again = with_drill(sim, DrillResult(ID, True, "drill pod-kill: pass"))  # next reconcile
    assert events(again) == [] and notices(d.status, again) == ()


def test_a_failed_drill_is_a_warning_and_a_new_drill_is_told_again() -> None:
    sim = healthy()
    with_drill(sim, DrillResult(ID, True, "drill pod-kill: pass"))
    other = "1" * 32
    d = with_drill(sim, DrillResult(other, False, "drill canary-fault: fail; failed: x"))
    assert events(d) == [("Warning", r.DRILL_FAILED, "drill canary-fault: fail; failed: x")]
    assert d.status.drill_recorded == other


def annotated(value: Any) -> dict[str, Any]:
    text = value if isinstance(value, str) else json.dumps(value)
    return {"metadata": {"annotations": {ANN_LAST_DRILL: text}}}


def test_the_annotation_is_read_as_written_by_the_drill() -> None:
    got = last_drill(annotated({"id": ID, "kind": "pod-kill", "verdict": "fail",
                                "summary": "drill pod-kill: fail"}))
    assert got == DrillResult(ID, False, "drill pod-kill: fail")
    shown = last_drill(annotated({"id": ID, "verdict": "pass", "summary": "a\nb\x1b[31m" * 100}))
    assert shown is not None and len(shown.summary) <= 300
    assert "\x1b" not in shown.summary and "\n" not in shown.summary  # one printable line


@pytest.mark.parametrize("value", [
    "not json", [], {"id": "../x", "verdict": "pass"}, {"id": ID, "verdict": "maybe"},
    {"verdict": "pass"}, {"id": ID.upper(), "verdict": "pass"},
])
def test_what_is_not_a_drill_result_is_ignored(value: Any) -> None:
    assert last_drill(annotated(value)) is None
    assert last_drill({"metadata": {}}) is None
