"""The business evaluation gate in the pure core
(:mod:`inference_rollout.core.evaluation_gate` and its use in
:func:`~inference_rollout.core.decide.decide`): the first traffic shift waits for a recorded
evaluation of the current canary; a drop beyond ``maxDropPoints`` rolls back; errors
retry and never pass; it runs once per revision and survives a lost status write."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.unit.coresim import Sim, manifest_spec

from inference_rollout.api import reasons as r
from inference_rollout.api.status import InferenceRolloutStatus
from inference_rollout.core.decide import decide
from inference_rollout.core.evaluation_gate import evaluation_due
from inference_rollout.core.types import (
    EvaluationOutcome,
    Observation,
    RecordEvent,
    SetWeights,
)

EVAL = {"configMapRef": {"name": "cases"}, "sampleSize": 20, "maxDropPoints": 5}


@dataclass
class EvalSim(Sim):
    """A :class:`Sim` whose reconcile also runs the evaluation when the gate says it is due;
    ``scores`` is what the next run returns (``(canary, stable)``, or an error string)."""

    scores: tuple[float, float] | str = (90.0, 90.0)
    runs: list[str] = field(default_factory=list)

    def evaluate(self) -> EvaluationOutcome | None:
        if not evaluation_due(self.spec, self.status, self.now, self.world.deployments):
            return None
        assert self.status.canary_revision is not None
        self.runs.append(self.status.canary_revision)
        return outcome(self.status.canary_revision, self.scores)


def outcome(revision: str, scores: tuple[float, float] | str) -> EvaluationOutcome:
    if isinstance(scores, str):
        return EvaluationOutcome(revision, error=scores)
    return EvaluationOutcome(revision, scores[0], scores[1], cases=20)


def in_release(**kw: Any) -> tuple[EvalSim, str, str]:
    body = manifest_spec(evaluation=EVAL, **kw.pop("spec", {}))
    sim = EvalSim(body, **kw)
    sim.reconcile()
    sim.reconcile()
    assert sim.status.phase == "Healthy"
    old = sim.stable
    assert old is not None
    new = sim.release("m2")
    sim.decisions.clear()
    return sim, old, new


def weights(sim: Sim) -> list[int]:
    return [a.canary_weight for d in sim.decisions for a in d.actions
            if isinstance(a, SetWeights)]


def events(sim: Sim) -> list[RecordEvent]:
    return [a for d in sim.decisions for a in d.actions if isinstance(a, RecordEvent)]


def test_the_first_shift_waits_for_the_evaluation_then_it_passes_and_promotes() -> None:
    sim, _old, new = in_release()
    d = sim.reconcile(settle=False)  # the release starts; canary pods are not Ready yet
    assert sim.status.current_step == 0 and sim.status.canary_weight == 0
    assert sim.runs == []  # not before the canary can serve step 1
    assert not evaluation_due(sim.spec, sim.status, sim.now, sim.world.deployments)
    assert d.requeue_after is not None
    sim.world.settle()
    sim.run_until(lambda s: s.stable == new, limit=900)
    assert sim.runs == [new]  # once per revision
    assert weights(sim)[:2] == [0, 5]
    ev = sim.status.evaluation
    # after promotion the record stays, naming the revision it was for
    assert ev is not None and ev.revision == new and ev.verdict == "Pass"
    assert (ev.canary_score, ev.stable_score) == (90.0, 90.0)
    passed = [e for e in events(sim) if e.reason == r.EVALUATION_PASSED]
    assert len(passed) == 1 and passed[0].type == "Normal" and "90.0" in passed[0].message


def test_no_weight_before_a_recorded_pass() -> None:
    sim, _old, _new = in_release()
    sim.reconcile()  # the release starts; its pods become Ready afterwards
    assert sim.status.evaluation is None
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=120)
    # every SetWeights with weight > 0 comes after the status records a pass
    for d in sim.decisions:
        if any(isinstance(a, SetWeights) and a.canary_weight > 0 for a in d.actions):
            assert d.status.evaluation is not None and d.status.evaluation.verdict == "Pass"


def test_a_drop_beyond_max_drop_points_rolls_back_before_any_traffic() -> None:
    sim, old, new = in_release(scores=(70.0, 100.0))
    sim.run_until(lambda s: s.status.aborted, limit=300)
    st = sim.status
    assert st.abort_reason == r.EVALUATION_FAILED and st.phase == "Degraded"
    assert st.canary_weight == 0 and sim.world.route == {old: 100, new: 0}
    assert max(weights(sim)) == 0
    assert st.evaluation is not None and st.evaluation.verdict == "Fail"
    assert (st.evaluation.canary_score, st.evaluation.stable_score) == (70.0, 100.0)
    warn = [e for e in events(sim) if e.reason == r.EVALUATION_FAILED]
    assert len(warn) == 1 and warn[0].type == "Warning"
    assert "70.0" in warn[0].message and "100.0" in warn[0].message
    assert "70.0" in st.message and "100.0" in st.message
    sim.run(120)
    assert sim.runs == [new]  # not re-run while rolled back
    assert sim.status.aborted and sim.world.deployments[new].desired == 0


def test_a_drop_within_max_drop_points_passes() -> None:
    sim, _old, _new = in_release(scores=(95.0, 100.0))  # exactly 5 points: allowed
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=300)
    assert sim.status.evaluation is not None and sim.status.evaluation.verdict == "Pass"


def test_retry_runs_the_evaluation_again() -> None:
    sim, _old, new = in_release(scores=(0.0, 100.0))
    sim.run_until(lambda s: s.status.aborted, limit=300)
    sim.scores = (100.0, 100.0)
    sim.reconcile(retry=True)
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=300)
    assert sim.runs == [new, new]


def test_an_error_never_passes_and_is_retried_after_the_interval() -> None:
    sim, _old, _new = in_release(scores="canary Service: 20/20 requests failed")
    sim.run(25)  # interval 10s: runs at ~0, 10, 20
    assert len(sim.runs) == 3 and sim.status.canary_weight == 0
    ev = sim.status.evaluation
    assert ev is not None and ev.verdict == "Error" and ev.consecutive_errors == 3
    assert sim.status.phase == "Progressing"
    assert [e.reason for e in events(sim)].count(r.EVALUATION_ERROR) == 3
    sim.scores = (80.0, 80.0)
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=60)
    assert sim.status.evaluation is not None and sim.status.evaluation.verdict == "Pass"


def test_the_error_limit_pauses_by_default_and_resume_runs_it_again() -> None:
    sim, _old, _new = in_release(scores="ConfigMap cases: not found")
    sim.run(60)
    assert len(sim.runs) == 4  # consecutiveErrorLimit 4, then paused
    assert sim.status.paused_reason == r.EVALUATION_ERROR_LIMIT
    assert sim.status.phase == "Paused" and sim.status.canary_weight == 0
    sim.scores = (50.0, 50.0)
    sim.reconcile(resume=True)
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=60)
    assert len(sim.runs) == 5


def test_the_error_limit_rolls_back_with_on_error_limit_abort() -> None:
    analysis = {**manifest_spec()["analysis"], "onErrorLimit": "Abort",
                "consecutiveErrorLimit": 2}
    sim, _old, _new = in_release(scores="boom", spec={"analysis": analysis})
    sim.run_until(lambda s: s.status.aborted, limit=60)
    assert sim.status.abort_reason == r.EVALUATION_ERROR_LIMIT
    assert len(sim.runs) == 2 and max(weights(sim)) == 0


def test_recording_is_idempotent_and_a_lost_status_write_only_reruns() -> None:
    sim, old, new = in_release(scores=(60.0, 100.0))
    sim.reconcile()  # release starts, pods settle
    before = InferenceRolloutStatus.model_validate(sim.status.model_dump())
    d = sim.reconcile()  # runs the evaluation: fails → rollback
    assert d.status.aborted
    # the status write is lost: the next reconcile starts from `before` and reaches the same end
    sim.status = before
    d2 = sim.reconcile()
    assert d2.status.aborted and d2.status.abort_reason == r.EVALUATION_FAILED
    assert sim.world.route == {old: 100, new: 0}
    # an outcome offered again once decided changes nothing
    spec = sim.spec
    again = decide(spec, d2.status, Observation(
        generation=sim.generation, template_hash=new, revisions=dict(sim.world.deployments),
        route=dict(sim.world.route or {}), evaluation=outcome(new, (100.0, 100.0))), sim.now)
    assert again.status.evaluation == d2.status.evaluation and again.status.aborted


def test_a_stale_outcome_for_another_revision_is_ignored() -> None:
    sim, _old, new = in_release()
    sim.reconcile()
    st = sim.status
    st.evaluation = None
    d = decide(sim.spec, st, Observation(
        generation=sim.generation, template_hash=new, revisions=dict(sim.world.deployments),
        route=dict(sim.world.route or {}), evaluation=outcome("other", (0.0, 100.0))), sim.now)
    assert not d.status.aborted and d.status.evaluation is None
    assert d.status.canary_weight == 0


def test_a_new_template_mid_gate_evaluates_the_new_canary() -> None:
    sim, _old, new = in_release(scores="boom")
    sim.reconcile()
    sim.reconcile()
    assert sim.runs == [new]
    newer = sim.release("m3")
    sim.scores = (90.0, 90.0)
    sim.run_until(lambda s: s.canary == newer and s.status.canary_weight == 5, limit=120)
    assert sim.runs[-1] == newer
    assert sim.status.evaluation is not None and sim.status.evaluation.revision == newer


def test_without_evaluation_nothing_is_due() -> None:
    sim = EvalSim(manifest_spec())
    sim.reconcile()
    sim.reconcile()
    sim.release("m2")
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=120)
    assert sim.runs == [] and sim.status.evaluation is None


def test_message_says_the_release_waits_for_the_evaluation() -> None:
    sim, _old, _new = in_release(scores="boom")
    sim.reconcile()
    sim.reconcile()
    st = sim.status
    assert st.evaluation is not None and st.evaluation.verdict == "Error"
    assert "waiting for the business evaluation" in st.message
