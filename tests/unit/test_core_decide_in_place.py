"""``decide`` on an adapter release (docs/adapters.md, "How the wiring keeps decide as it is"),
observed through ``core.serving_versions`` as the handler will:
the canary is a serving version that runs on the stable's own pods, so its pod count is carved
out of the fleet (``capacity.in_place_canary_pods``) and no pod is ever added or removed.

The world here is one Deployment of ``FLEET`` pods shared by serving versions: ``EnsureRevision``
of an in-place serving version sets how many pods it is to have, and each reconcile moves one
pod (out of its set first, into the other at the next reconcile), as the adapter planner does.
Everything else in ``decide`` is the template release's, so these tests check only what differs:
the counts asked for, that weights wait for moved pods, and that nothing grows the fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from tests.unit.coresim import Sim, World, manifest_spec, with_model

from inference_rollout.core import serving_versions
from inference_rollout.core.adapter_plan import serving_version, set_id
from inference_rollout.core.capacity import in_place_canary_pods
from inference_rollout.core.revision import template_hash
from inference_rollout.core.serving_versions import ServingVersionFacts as Facts
from inference_rollout.core.serving_versions import in_place
from inference_rollout.core.types import (
    Decision,
    DeleteRevision,
    EnsureRevision,
    Measurement,
    Observation,
    RevisionState,
    SetWeights,
)

FLEET = 4
WEIGHTS = (5, 20, 50, 100)
V1 = {"support": "s3://adapters/support/v1"}
V2 = {"support": "s3://adapters/support/v2"}
TEMPLATE = template_hash(manifest_spec()["template"])
SV1, SV2 = serving_version(TEMPLATE, V1), serving_version(TEMPLATE, V2)


@dataclass
class SharedFleet(World):
    """One Deployment's pods, each admitted to one serving version's set (or moving)."""

    pods: dict[str, int] = field(default_factory=dict)
    moving_to: str | None = None

    def settle(self) -> None:
        """Replaced by :meth:`move_one`, which needs to know the stable and the canary."""

    def move_one(self, stable: str | None, canary: str | None, in_place: frozenset[str],
                 shared: set[str]) -> None:
        """``shared``: the serving versions of this Deployment's template; any other revision
        has a Deployment of its own, whose pods start as asked (as in ``World``)."""
        own = {sv: d for sv, d in self.deployments.items() if sv not in shared}
        self.deployments.update({sv: RevisionState(d.desired, d.desired, d.desired)
                                 for sv, d in own.items()})
        if stable is None or stable not in shared:
            return
        if not self.pods:  # the first release: the Deployment's pods start on its set
            self.pods[stable] = FLEET
        elif self.moving_to is not None:
            self.pods[self.moving_to] = self.pods.get(self.moving_to, 0) + 1
            self.moving_to = None
        else:
            on_canary = (self.deployments[canary].desired
                         if canary in in_place and canary in self.deployments else 0)
            want = dict.fromkeys(self.pods, 0)
            want[stable] = FLEET - on_canary
            if on_canary:
                assert canary is not None
                want[canary] = on_canary
            source = next((sv for sv in sorted(self.pods) if self.pods[sv] > want[sv]), None)
            target = next((sv for sv in sorted(want) if self.pods.get(sv, 0) < want[sv]), None)
            if source is not None and target is not None:
                self.pods[source] -= 1
                self.moving_to = target  # out of every set for one reconcile: a drain
        for sv, state in self.deployments.items():
            if sv not in shared:
                continue
            ready = self.pods.get(sv, 0)
            self.deployments[sv] = RevisionState(desired=state.desired, ready=ready,
                                                 available=ready)

    def in_flight(self) -> int:
        return sum(self.pods.values()) + (self.moving_to is not None)


@dataclass
class AdapterSim(Sim):
    """A rollout whose observed revision is a serving version (template hash + adapter set)."""

    world: SharedFleet = field(default_factory=SharedFleet)
    revision: str = SV1
    #: Serving version -> its template's hash (the Deployment it runs on).
    templates: dict[str, str] = field(default_factory=lambda: {SV1: TEMPLATE, SV2: TEMPLATE})
    #: Serving version -> its adapter set.
    sets: dict[str, str] = field(default_factory=lambda: {SV1: set_id(V1), SV2: set_id(V2)})
    #: Each reconcile's observation and decision, to check the decision against what it saw.
    seen: list[tuple[Observation, Decision]] = field(default_factory=list)
    last_observation: Observation | None = None

    def in_place(self) -> frozenset[str]:
        """Every serving version of the stable's template but the stable: they share its pods."""
        stable = self.status.stable_revision
        if stable is None:
            return frozenset()
        return frozenset(sv for sv in {self.revision} | set(self.world.deployments)
                         if sv != stable and self.templates[sv] == self.templates[stable])

    def observe(self, measurements: dict[str, Measurement] | None, **kw: Any) -> Observation:
        """As the handler will: Deployments by template, a Service per serving version (its
        pod count), pods admitted per set, mapped by ``core.serving_versions``."""
        created = self.world.deployments  # EnsureRevision's counts: each version's Service
        facts = {sv: Facts(self.templates[sv], self.sets[sv], d.desired)
                 for sv, d in created.items()}
        facts.setdefault(self.revision, Facts(self.templates[self.revision],
                                              self.sets[self.revision], service=False))
        by_template: dict[str, RevisionState] = {}
        admitted: dict[tuple[str, str], int] = {}
        for sv, d in created.items():
            template = self.templates[sv]
            if template == TEMPLATE:  # the shared fleet: its pods, as moved
                by_template[template] = RevisionState(FLEET, FLEET, FLEET)
                admitted[(template, self.sets[sv])] = self.world.pods.get(sv, 0)
            else:  # a Deployment of its own, its pods admitted as they start
                by_template[template] = RevisionState(d.desired, d.desired, d.desired)
                admitted[(template, self.sets[sv])] = d.desired
        seen = serving_versions.observe(by_template, facts, admitted,
                                        self.status.stable_revision, self.status.canary_revision)
        stable = self.status.stable_revision
        assert {sv for sv in facts if in_place(seen.templates, stable, sv)} == (
            self.in_place() & set(facts))
        obs = replace(super().observe(measurements, **kw), template_hash=self.revision,
                      revisions=seen.revisions, templates=seen.templates)
        self.last_observation = obs
        return obs

    def reconcile(self, **kw: Any) -> Decision:
        d = super().reconcile(settle=False, **{k: v for k, v in kw.items() if k != "settle"})
        assert self.last_observation is not None
        self.seen.append((self.last_observation, d))
        self.world.move_one(self.status.stable_revision, self.status.canary_revision,
                            self.in_place(),
                            {sv for sv, t in self.templates.items() if t == TEMPLATE})
        return d

    def release(self, model: str = "") -> str:
        """An adapter release: the adapters change, the template does not."""
        self.revision = SV2
        self.generation += 1
        return SV2

    def template_release(self, model: str) -> str:
        """A new template (with the same adapters): a Deployment of its own."""
        self.body = with_model(self.body, model)
        self.generation += 1
        new = template_hash(self.body["template"])
        self.revision = serving_version(new, V2)
        self.templates[self.revision] = new
        self.sets[self.revision] = set_id(V2)
        return self.revision


def started(**kw: Any) -> AdapterSim:
    sim = AdapterSim(manifest_spec(**kw))
    sim.run_until(lambda s: s.status.phase == "Healthy" and s.world.pods == {SV1: FLEET},
                  limit=60)
    return sim


def ensured(sim: AdapterSim, revision: str) -> list[int]:
    return [a.replicas for _, d in sim.seen for a in d.actions
            if isinstance(a, EnsureRevision) and a.revision == revision]


def weights_with_what_they_saw(sim: AdapterSim) -> list[tuple[int, int]]:
    """Each canary weight written, with the canary's admitted pods the decision saw."""
    out = []
    for obs, d in sim.seen:
        for a in d.actions:
            if isinstance(a, SetWeights) and a.canary_revision == SV2:
                seen = obs.revisions.get(SV2)
                out.append((a.canary_weight, seen.ready if seen else 0))
    return out


@pytest.mark.parametrize("mode", ["surge", "swap"])
def test_a_good_adapter_release_moves_each_steps_share_and_never_adds_a_pod(mode: str) -> None:
    sim = started(capacity={"mode": mode, "maxSurge": 1})
    sim.release()
    sim.run_until(lambda s: s.status.stable_revision == SV2 and s.status.phase == "Healthy",
                  limit=900)
    steps = [in_place_canary_pods(FLEET, w) for w in WEIGHTS]
    assert steps == [1, 1, 2, 3]  # the stable set keeps a pod until promotion, also at 100 %
    # The canary is asked for exactly each step's share, then the fleet when it is promoted.
    asked = ensured(sim, SV2)
    assert asked == sorted(set(asked)) and set(asked) == {*steps, FLEET}, asked
    # The stable (the Deployment's owner) is never asked for another size: no pod added.
    assert set(ensured(sim, SV1)) <= {FLEET}
    # Every weight was written when the pods already moved could carry it.
    for weight, ready in weights_with_what_they_saw(sim):
        assert ready >= in_place_canary_pods(FLEET, weight), (weight, ready)
    # On the route at 0 % first (a user sees it there), then each step's weight once.
    assert [w for w, _ in weights_with_what_they_saw(sim)] == [0, *WEIGHTS]
    # Promoted: every pod moves to the new set, and the old serving version goes after its delay.
    sim.run_until(lambda s: any(isinstance(a, DeleteRevision) and a.revision == SV1
                                for _, d in s.seen for a in d.actions), limit=1200)
    sim.run(10)
    assert sim.world.pods.get(SV2) == FLEET and sim.world.in_flight() == FLEET
    # Its cost: no pod started, no pod beyond the fleet, and the scale subresource saw the
    # fleet once throughout (core/scale.py counts an in-place version's pods as the stable's).
    cost = sim.status.release_cost
    assert cost is not None and cost.outcome == "Promoted"
    assert (cost.pods_started, cost.pod_seconds, cost.gpu_seconds) == (0, 0, 0)
    assert {d.status.replicas for _, d in sim.seen} == {FLEET}


def test_a_bad_adapter_release_goes_to_weight_0_first_then_its_pods_go_back() -> None:
    sim = started()
    sim.release()
    sim.run_until(lambda s: (s.status.canary_weight or 0) >= 20, limit=600)
    sim.verdicts = "fail"
    d = sim.run_until(lambda s: s.status.aborted, limit=120)
    weights = [a for a in d.actions if isinstance(a, SetWeights)]
    assert weights and weights[0].canary_weight == 0
    assert sim.world.pods.get(SV2, 0) >= 1  # the canary keeps its pods for abortScaleDownDelay
    sim.run_until(lambda s: s.world.pods == {SV1: FLEET, SV2: 0} and s.world.moving_to is None,
                  limit=sim.spec.strategy.abort_scale_down_delay_seconds + 20)
    assert ensured(sim, SV2)[-1] == 0
    assert set(ensured(sim, SV1)) <= {FLEET}
    assert sim.status.stable_revision == SV1


def test_a_template_release_during_an_adapter_release_is_not_held_back_by_its_moved_pods() -> None:
    """The adapter canary is abandoned (docs/adapters.md: a template release supersedes it) and
    keeps its serving version for abortScaleDownDelay; in swap mode it holds no GPU of the
    quota (its pods are the stable's), so the new template's first canary pod starts at once."""
    sim = started(capacity={"mode": "swap", "maxSurge": 1})
    sim.release()
    sim.run_until(lambda s: s.status.canary_weight == 50, limit=900)
    new = sim.template_release("m2")
    d = sim.reconcile()
    assert sim.status.canary_revision == new and SV2 in sim.status.old_revisions
    assert SV2 in sim.world.deployments  # not deleted yet: its delay runs
    assert EnsureRevision(new, 1) in d.actions  # the quota's one spare GPU, not 0
    sim.run_until(lambda s: s.status.stable_revision == new and s.status.phase == "Healthy",
                  limit=1800)
    assert sim.world.pods.get(SV2, 0) == 0
