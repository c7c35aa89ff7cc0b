"""An evaluation the operator never finished (it restarted, or was killed for memory during the
run) is an error, not a run to start again at once (issue 29: five evaluating rollouts took the
operator past its memory limit, and nothing stopped the next process from doing the same).

The reconciler writes ``status.evaluationRunning`` (:func:`evaluation_gate.begun`) before the
run; the sims here die right after that write, as a killed operator would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.unit.coresim import Sim
from tests.unit.test_core_evaluation import EvalSim, events, in_release

from inference_rollout.api import reasons as r
from inference_rollout.core.evaluation_gate import begun, evaluation_due
from inference_rollout.core.types import Decision, EvaluationOutcome


class Killed(Exception):
    """The operator process ends during the evaluation."""


@dataclass
class KillingSim(EvalSim):
    """Each of the first ``kills`` runs dies after the reconciler recorded it as begun."""

    kills: int = 0

    def evaluate(self) -> EvaluationOutcome | None:
        if self.kills and evaluation_due(self.spec, self.status, self.now,
                                         self.world.deployments):
            self.status = begun(self.status, self.now)  # the write before the run
            assert self.status.canary_revision is not None
            self.runs.append(self.status.canary_revision)
            self.kills -= 1
            raise Killed
        return super().evaluate()

    def reconcile(self, **kw: Any) -> Decision:
        try:
            return Sim.reconcile(self, **kw)
        except Killed:  # the next process starts 1 s later from the status written so far
            return Decision(actions=(), status=self.status, requeue_after=1.0)


def killing(kills: int, **kw: Any) -> KillingSim:
    sim, _old, _new = in_release(**kw)
    killer = KillingSim(sim.body, scores=sim.scores, kills=kills)
    killer.world, killer.status, killer.generation = sim.world, sim.status, sim.generation
    return killer


def test_a_run_the_operator_never_finished_is_an_error_retried_after_the_interval() -> None:
    sim = killing(kills=1)
    sim.reconcile()  # the release starts; the pods settle
    sim.reconcile()  # the evaluation begins, and the operator dies
    assert sim.runs and sim.status.evaluation_running is not None
    assert sim.status.evaluation_running.revision == sim.status.canary_revision
    # the next operator does not start it again: it records the interrupted run as an error
    assert not evaluation_due(sim.spec, sim.status, sim.now, sim.world.deployments)
    sim.reconcile()
    ev = sim.status.evaluation
    assert ev is not None and ev.verdict == "Error" and ev.consecutive_errors == 1
    assert ev.message.startswith("interrupted: the operator stopped while the evaluation")
    assert sim.status.evaluation_running is None
    assert len(sim.runs) == 1 and sim.status.canary_weight == 0
    assert [e.reason for e in events(sim)][-1] == r.EVALUATION_ERROR
    # after analysis.interval (10 s) it runs again, completes, and the release goes on
    sim.run_until(lambda s: s.status.canary_weight == 5, limit=60)
    assert len(sim.runs) == 2
    assert sim.status.evaluation is not None and sim.status.evaluation.verdict == "Pass"


def test_an_evaluation_that_kills_every_operator_ends_paused_at_the_error_limit() -> None:
    sim = killing(kills=100)
    sim.run(120)
    assert len(sim.runs) == 4  # consecutiveErrorLimit 4, one run per interval, then paused
    assert sim.status.paused_reason == r.EVALUATION_ERROR_LIMIT
    assert sim.status.phase == "Paused" and sim.status.canary_weight == 0
    assert sim.status.evaluation_running is None
    ev = sim.status.evaluation
    assert ev is not None and ev.consecutive_errors == 4 and "interrupted" in ev.message


def test_a_new_canary_forgets_the_old_ones_unfinished_run() -> None:
    sim = killing(kills=1)
    sim.reconcile()
    sim.reconcile()
    old_canary = sim.status.canary_revision
    assert sim.status.evaluation_running is not None
    newer = sim.release("m3")
    sim.reconcile()
    assert newer != old_canary and sim.status.canary_revision == newer
    assert sim.status.evaluation_running is None and sim.status.evaluation is None
