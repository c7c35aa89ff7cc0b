"""The reconciler's hands for a rollout with adapters (docs/adapters.md): the core's actions,
keyed by serving version, carried out on Services and Deployments keyed otherwise; one round
of pod moves per reconcile; and what the status and the analysis read of the pods.

``decide`` asks for a serving version's pods (``EnsureRevision``) exactly as for a template
revision's.  Here that becomes: the version's Service, recording the count asked (the planner's
target for an in-place canary), and, only for the version that owns its template's pods (the
stable's, or a template release's canary), the template's Deployment at that size.  A
``DeleteRevision`` removes the version's Service, and the Deployment only once no live version
runs on its template.  Which pods serve which set is then the planner's
(:mod:`..core.adapter_plan`), one move round per reconcile: the pods say what they serve, and
the next reconcile reads them again before it moves on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from ..api.spec import PodTemplate
from ..api.status import MAX_ADAPTER_PODS, AdapterPod
from ..core import serving_versions
from ..core.adapter_plan import in_its_set, plan
from ..core.serving_versions import ServingVersionFacts, in_place
from ..core.types import Action, EnsureRevision
from .adapter_pods import AdapterPods, MoveFailure
from .adapter_world import AdapterWorld
from .revisions import RevisionError, Revisions

log = logging.getLogger("inference_rollout")


@dataclass
class VersionRevisions:
    """``apply_actions``' revisions for a rollout with adapters.  ``stable``/``canary``: the
    status the decision leaves (a version is in place, or owns its template, by that status:
    after a promotion the new stable owns the Deployment it shared)."""

    revisions: Revisions
    world: AdapterWorld
    stable: str | None
    canary: str | None
    deleted: set[str] = field(default_factory=set)

    def _facts(self, version: str) -> ServingVersionFacts:
        facts = self.world.versions.get(version)
        if facts is None:  # decide asks only for versions it saw, and the spec's (always here)
            raise RevisionError(f"serving version {version}: no Service records it")
        return facts

    def _port(self, version: str, facts: ServingVersionFacts, template: PodTemplate | None) -> int:
        deployment = self.world.deployments.get(facts.template)
        if deployment is not None and deployment.port is not None:
            return deployment.port
        if template is None or version != self.world.spec_version:
            raise RevisionError(f"serving version {version}: the serving port of template "
                                f"{facts.template} cannot be read (its Deployment is gone)")
        return template.serving_port()

    async def ensure(self, version: str, replicas: int, template: PodTemplate | None,
                     template_revision: str) -> None:
        """The version's Service records ``replicas`` (created first: the route names it);
        the Deployment is sized only by the version that owns its template's pods.  A plain
        revision (from before the rollout had adapters) is scaled as one."""
        del template_revision  # the spec's version: ``world.spec_version``
        if self._plain(version):
            await self.revisions.ensure(version, replicas, None, "")
            return
        facts = self._facts(version)
        port = self._port(version, facts, template)
        await self.revisions.ensure_version(version, replace(facts, pods=replicas), port)
        if in_place(self.world.seen.templates, self.stable, version):
            return  # its pods are the stable's: moved by the planner, never added
        # The spec's template is the one to create a missing Deployment from (an adapter
        # release's versions share it: the same template whatever their sets).
        await self.revisions.ensure(facts.template, replicas, template,
                                    self.world.versions[self.world.spec_version].template,
                                    adapters=True)

    def _plain(self, revision: str) -> bool:
        return revision not in self.world.versions and revision in self.world.deployments

    async def delete(self, version: str) -> None:
        if self._plain(version):
            await self.revisions.delete(version)
            return
        facts = self.world.versions.get(version)
        await self.revisions.delete(version, ("Service",))
        self.deleted.add(version)
        if facts is not None and not self._template_in_use(facts.template):
            await self.revisions.delete(facts.template, ("Deployment",))

    async def orphan(self, version: str) -> None:
        if self._plain(version):
            await self.revisions.orphan(version)
            return
        facts = self.world.versions.get(version)
        await self.revisions.orphan(version, ("Service",))
        if facts is not None:
            await self.revisions.orphan(facts.template, ("Deployment",))

    def _template_in_use(self, template: str) -> bool:
        """A version that stays runs on ``template``'s pods (the live ones, the spec's, any
        whose Service remains)."""
        live = {self.stable, self.canary, self.world.spec_version}
        return any(f.template == template for v, f in self.world.versions.items()
                   if v not in self.deleted and (f.service or v in live))


@dataclass(frozen=True)
class MoveRound:
    moved: int
    failures: tuple[MoveFailure, ...]
    #: Why a template's pods were left as they are (a set whose adapters are unknown).
    held: tuple[str, ...]
    #: Seconds until a draining pod may be changed (None: nothing waits on time).
    wake_in: float | None


async def move_pods(pods: AdapterPods, world: AdapterWorld, stable: str | None,
                    canary: str | None, actions: Iterable[Action], now: datetime,
                    drain_seconds: float, drain_max_seconds: float | None = None) -> MoveRound:
    """One round of the planner's moves per template, toward the pod counts this decision
    asked (its ``EnsureRevision``s win over the counts the Services recorded)."""
    asked = {a.revision: a.replicas for a in actions if isinstance(a, EnsureRevision)}
    moved, failures, held, wake = 0, [], [], None
    targets = serving_versions.pod_targets(world.versions, stable, canary, asked)
    for template, target in sorted(targets.items()):
        observed = world.pods.get(template)
        if isinstance(target, str):
            held.append(f"template {template}: {target}")
            continue
        if not observed:
            continue
        p = plan([o.adapters for o in observed.values()], target.sets, target.stable_set,
                 target.canary_set, target.canary_pods, now, drain_seconds, drain_max_seconds)
        failures += await pods.apply(p.moves, observed, now)
        moved += len(p.moves)
        if p.wake_in is not None:
            wake = p.wake_in if wake is None else min(wake, p.wake_in)
    return MoveRound(moved, tuple(failures), tuple(held), wake)


def _version_of(world: AdapterWorld, template: str) -> dict[str, str]:
    """Set id -> the serving version of ``template`` whose Service selects it."""
    return {f.adapter_set: v for v, f in world.versions.items()
            if f.template == template and f.service}


def version_pods(world: AdapterWorld) -> dict[str, tuple[str, ...]]:
    """Each serving version's pods by name (admitted to its set and serving it exactly): the
    analysis' selector of a version that shares its template's pods (``measure(pods=)``)."""
    sets = serving_versions.known_sets(world.versions)
    out: dict[str, list[str]] = {v: [] for v in world.versions}
    for template, by_name in world.pods.items():
        versions = _version_of(world, template)
        for name, observed in sorted(by_name.items()):
            version = versions.get(in_its_set(observed.adapters, sets) or "")
            if version is not None:
                out[version].append(name)
    return {v: tuple(names) for v, names in out.items()}


def status_pods(world: AdapterWorld) -> list[AdapterPod]:
    """``status.adapterPods``: every pod of the live templates, what its own ``/v1/models``
    lists, and the version whose Service selects it."""
    sets = serving_versions.known_sets(world.versions)
    out: list[AdapterPod] = []
    for template, by_name in world.pods.items():
        out += serving_versions.adapter_pods([o.adapters for o in by_name.values()], sets,
                                             _version_of(world, template))
    return sorted(out, key=lambda p: p.pod)[:MAX_ADAPTER_PODS]


def released_adapter(world: AdapterWorld | None, stable: str | None,
                     canary: str | None) -> str | None:
    """The model name an adapter release's evaluation and probes ask for: the first adapter
    (by name) whose source differs between the stable's and the canary's sets, or that only
    the canary serves.  None without adapters, or when the release changes none (a template
    release: the base model is what changed)."""
    if world is None or stable is None or canary is None:
        return None
    old, new = world.versions.get(stable), world.versions.get(canary)
    if old is None or new is None or old.adapters is None or new.adapters is None:
        return None
    if old.template != new.template:
        return None
    changed = sorted(n for n, source in new.adapters.items() if old.adapters.get(n) != source)
    return changed[0] if changed else None


def unread(world: AdapterWorld) -> list[str]:
    """Pods that serve but whose ``/v1/models`` did not answer: the planner leaves them where
    they are (never a guess), which holds a step until they answer; the log says which."""
    return sorted(name for by_name in world.pods.values() for name, o in by_name.items()
                  if o.adapters.serving and o.adapters.loaded is None)


def blocked(round_: MoveRound) -> Mapping[str, str]:
    """Pod -> why its last move failed, for the log (a failed move is retried next round)."""
    return {f.move.pod: f"{type(f.move).__name__}: {f.reason}" for f in round_.failures}
