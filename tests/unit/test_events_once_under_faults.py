"""Each transition's Event once, and only for what happened (issue 33, item 1), under forced
conflicts and kills.

Two releases (one promoted, one rolled back) are driven through the reconciler against the
in-memory API server while, at random, (a) another writer changes the rollout just before the
operator's status write, so the write meets a newer object and ``fenced`` decides again; (b) the
process dies just before its status write; (c) it dies after the write, before the decision's
Events are posted. A death is a ``Crash`` (not an ``Exception``: nothing in the operator may
catch it), after which the next reconcile runs in a new process (fresh ``Deps``).

What must hold, against the same story with no faults:

* no transition Event is posted twice, and they come in the same order;
* one is missing only where a process died after the status write and before the Events
  (the loss the design accepts: the status is the record), together with the Events of that
  same decision after it;
* every Event is posted for a status the server holds (the body's resourceVersion is the
  stored one), never for a decision whose write was refused.
"""

from __future__ import annotations

import asyncio
import copy
import random
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.test_reconciler_against_memory_api import DEPLOYMENTS, PROM, ROLLOUT, Cluster

from inference_rollout import reconciler
from inference_rollout.core.types import Decision, RecordEvent
from inference_rollout.kube import KubeError
from inference_rollout.paths import ApiPath
from inference_rollout.reconciler import Deps, reconcile

#: The Events that say a release moved (AnalysisVerdict is a reading, and which readings a
#: story sees depends on when it looks, which the faults change).
TRANSITIONS = {"FirstRelease", "NewRelease", "StepWeightSet", "StepComplete", "Promoted",
               "AnalysisFailed"}
STATUS = ROLLOUT + "/status"
POST_EVENTS = reconciler.post_events


class Crash(BaseException):
    """The operator's process died here."""


class Faults:
    def __init__(self, seed: int | None, conflict: float = 0.2, die_before_write: float = 0.1,
                 die_before_events: float = 0.2) -> None:
        self.rng = random.Random(seed)
        self.on = seed is not None
        self.p = (conflict, die_before_write, die_before_events)

    def roll(self, which: int) -> bool:
        return self.on and self.rng.random() < self.p[which]


class Story(Cluster):
    """The Cluster of the memory-API tests, with faults at the status write and the Events."""

    def __init__(self, faults: Faults) -> None:
        super().__init__()
        self.faults = faults
        self.posted: list[tuple[str, str]] = []
        self.lost: list[tuple[str, str]] = []  # the Events of decisions a death lost
        self.touches = 0
        inner = self.kube.request

        async def request(method: str, path: ApiPath, body: Any = None, *args: Any,
                          **kw: Any) -> Any:
            if method == "PATCH" and str(path) == STATUS:
                if self.faults.roll(0):  # someone else wrote first: the write will conflict
                    self.touches += 1
                    obj = copy.deepcopy(self.kube.objects[ROLLOUT])
                    obj["metadata"].setdefault("annotations", {})["other-writer"] = \
                        str(self.touches)
                    self.kube.put(ROLLOUT, obj)
                elif self.faults.roll(1):
                    raise Crash("died before the status write")
            return await inner(method, path, body, *args, **kw)

        self.kube.request = request  # type: ignore[method-assign]
        self.deps = self.new_process()

    def new_process(self) -> Deps:
        async def post(body: dict[str, Any], event: RecordEvent) -> None:
            stored = self.kube.objects[ROLLOUT]["metadata"]["resourceVersion"]
            assert body["metadata"]["resourceVersion"] == stored, \
                f"{event.reason} posted for a status the server does not hold"
            self.posted.append((event.reason, event.message))
            self.events.append(event)

        deps = Deps(kube=self.kube, post_event=post, now=lambda: self.now,
                    prometheus_allow=(PROM,), confine_queries=False)
        deps.sources[(PROM, 5.0, None)] = self.source  # type: ignore[assignment]
        return deps

    async def post_events(self, deps: Deps, body: dict[str, Any], decision: Decision) -> None:
        if self.faults.roll(2):
            self.lost += [(a.reason, a.message) for a in decision.actions
                          if isinstance(a, RecordEvent)]
            raise Crash("died after the status write, before its Events")
        await POST_EVENTS(deps, body, decision)

    def reconcile(self, seconds: float = 15) -> float:
        self.now += timedelta(seconds=seconds)
        try:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(reconciler, "post_events", self.post_events)
                delay = asyncio.run(reconcile(self.deps, self.body))
        except Crash:
            self.deps = self.new_process()
            delay = 0.0
        except KubeError as e:  # conflicts every time it decided: kopf retries after a backoff
            assert e.status == 409, e
            delay = 0.0
        for path, obj in self.kube.objects.items():  # the Deployment controller: pods Ready
            if path.startswith(DEPLOYMENTS + "/"):
                n = obj["spec"]["replicas"]
                obj["status"] = {"readyReplicas": n, "availableReplicas": n}
        return delay

    def until(self, done: Any, limit: int = 200) -> None:
        for _ in range(limit):
            if done(self.status):
                return
            self.reconcile()
        raise AssertionError(f"not reached in {limit} reconciles: {self.status.get('message')}")


def play(faults: Faults) -> Story:
    """A first release; a second promoted; a third rolled back for its error rate."""
    s = Story(faults)
    s.until(lambda st: st.get("phase") == "Healthy")
    first = s.status["stableRevision"]
    s.new_template("m2")
    s.until(lambda st: st.get("phase") == "Healthy" and not st.get("canaryRevision")
            and st.get("stableRevision") != first)
    s.new_template("m3")
    s.until(lambda st: st.get("currentStep") == 1)
    s.source.errors = 500.0
    s.until(lambda st: st.get("abortReason") == "AnalysisFailed")
    return s


def transitions(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [e for e in events if e[0] in TRANSITIONS]


def test_with_no_faults_every_transition_is_posted_once() -> None:
    s = play(Faults(None))
    got = transitions(s.posted)
    assert len(got) == len(set(got))
    assert [r for r, _ in got] == [
        "FirstRelease",
        "NewRelease", *["StepWeightSet", "StepComplete"] * 4, "Promoted",
        "NewRelease", "StepWeightSet", "StepComplete", "StepWeightSet", "AnalysisFailed"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
def test_under_conflicts_and_kills_a_transition_is_posted_at_most_once(seed: int) -> None:
    oracle = transitions(play(Faults(None)).posted)
    s = play(Faults(seed))
    got = transitions(s.posted)
    assert len(got) == len(set(got)), f"an Event posted twice: {got}"
    # In order, and each missing one lost with its decision to a death between the status
    # write and the Events.
    assert got == [e for e in oracle if e in got], f"out of order: {got}"
    for event in oracle:
        assert event in got or event in s.lost, \
            f"{event} never posted, and no death explains it (lost: {s.lost})"
