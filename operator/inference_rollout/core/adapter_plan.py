"""Which running pods serve which version of a rollout's LoRA adapters, and the next safe move
toward that (issue 31, item 1; the design is docs/adapters.md).

An adapter release changes no pod template: the operator loads the new adapter versions into
a subset of the running pods (sized by the step's weight), which a Service of their own selects
by label, and the route splits between the two subsets.  What makes it safe is the order each
pod is moved in, planned here and nowhere else:

1. **Out of the endpoints first.**  A pod that must change is relabelled ``moving`` (its label
   ``rollouts.inference.dev/adapter-set`` no longer names a set, so no Service selects it) and
   left to drain before anything is loaded: no request sees an adapter change under it.  The
   drain lasts ``drain_seconds`` (the endpoints and the gateway forget the pod), then as long as
   the pod's vLLM still has requests running or waiting, at most ``drain_max_seconds``: a
   generation can run for minutes, and a fixed time would cut the long ones.
2. **Load, unload, then read back.**  The adapters of the pod's target set are loaded (vLLM
   replaces an adapter of the same name in place), names no set uses any more are unloaded, and
   the next plan reads the pod's ``/v1/models`` again: what the pod *says* it serves is the only
   truth a plan starts from.
3. **Admit.**  Only a pod whose ``/v1/models`` lists exactly its target set is labelled with
   that set, in one write with the container start it was read from.

A crash between any two moves leaves a pod either out of the endpoints, or in them serving
exactly the set its label names; the next plan continues from what it observes.  A container
that started after the one its label was verified on lost its runtime adapters: its label is
stale, and it is taken out again (until then vLLM answers 404 for the adapter's model name on
it, never another version).  Pure: it reads the observation and returns moves; the reconciler
applies them.

Why a label and not a readiness gate: a gate's condition is written to the pod's status, which
a kubelet (and KWOK, the sandbox's) owns and rewrites, and it needs ``pods/status`` rights; a
label is the pod's own metadata, leaves the endpoints as fast, and shows in ``kubectl get pods
-L``.  A new pod comes from the template labelled ``pending``: out of every Service until it is
admitted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from .revision import short_hash

#: Adapter name → the source (path or URI) vLLM loads it from.
AdapterSources = Mapping[str, str]


def set_id(adapters: AdapterSources) -> str:
    """A set of adapter versions' name: a label value, like a revision's hash."""
    return short_hash("\n".join(f"{name}={adapters[name]}" for name in sorted(adapters)))


def serving_version(template_hash: str, adapters: AdapterSources) -> str:
    """What the route, the Services, the status and the analysis name (docs/adapters.md): the
    template hash itself without adapters (every name a rollout without adapters has today is
    unchanged), else a hash of the template hash and the adapter set, in the same ten hex
    characters, so a status that holds it passes the revision pattern."""
    if not adapters:
        return template_hash
    return short_hash(f"{template_hash}\n{set_id(adapters)}")


@dataclass(frozen=True)
class PodAdapters:
    """One running pod of the revision, as observed."""

    name: str
    #: Its serving container is Ready (vLLM answers): a pod that is not is left alone.
    serving: bool
    #: Adapter name → source, as its ``/v1/models`` lists them; None: could not be read.
    loaded: Mapping[str, str] | None
    #: The set its label says it serves (None: ``moving``, ``pending`` or no label).
    label: str | None
    #: Its label names a set: it is in that set's Service's endpoints (with ``serving``).
    admitted: bool
    #: When its label last changed (the drain counts from an eviction).
    moved_at: datetime | None = None
    #: When its containers last started, and the start its label was verified on (Admit).
    container_started_at: datetime | None = None
    verified_start: datetime | None = None
    #: Requests its vLLM has running or waiting (``vllm:num_requests_running`` + ``_waiting``
    #: at its ``/metrics``), read while it drains; None: not read, or could not be.
    busy: int | None = None

    @property
    def stale(self) -> bool:
        """Admitted, but its containers started after the start its set was read on: the
        runtime adapters it was admitted with are gone."""
        verified = self.verified_start or self.moved_at
        return (self.admitted and verified is not None and self.container_started_at is not None
                and self.container_started_at > verified)


@dataclass(frozen=True)
class Evict:
    """Label the pod ``moving``: out of every Service's endpoints."""

    pod: str


@dataclass(frozen=True)
class LoadAdapter:
    pod: str
    adapter: str
    source: str


@dataclass(frozen=True)
class UnloadAdapter:
    pod: str
    adapter: str


@dataclass(frozen=True)
class Admit:
    """Label the pod with the set it serves, recording the container start its ``/v1/models``
    was read on (a restart after that read makes the label stale, never wrong)."""

    pod: str
    set_id: str
    verified_start: datetime | None = None


PodMove = Evict | LoadAdapter | UnloadAdapter | Admit


@dataclass(frozen=True)
class AdapterPlan:
    #: Pod name → the set it is to serve.
    targets: dict[str, str]
    moves: tuple[PodMove, ...]
    #: Pods admitted and serving their target, per set.
    in_place: dict[str, int]
    #: Seconds until a draining pod may be changed (None: nothing waits on time).
    wake_in: float | None


#: How often a pod that still has requests in flight is read again while it drains.
BUSY_RECHECK_SECONDS = 1.0


def _drain_left(p: PodAdapters, waited: float, least: float, most: float | None) -> float:
    """Seconds until the pod may be changed (0: now).  Its own count of requests in flight
    ends the drain early or extends it; unread (None), the least time is all it gets."""
    if waited < least:
        return least - waited
    if p.busy and most is not None and waited < most:
        return min(BUSY_RECHECK_SECONDS, most - waited)
    return 0.0


def targets(pods: Sequence[PodAdapters], sets: Mapping[str, AdapterSources], stable: str,
            canary: str | None, canary_count: int) -> dict[str, str]:
    """Each pod's target set: ``canary_count`` pods on ``canary`` (the count the decision sized
    for the step, ``capacity.in_place_canary_pods``; never more than all the pods), the rest on
    ``stable``.  The canary's pods are those that already serve it (or carry its label), then by
    name: a pod is never moved back and forth between two plans."""
    if canary is None or canary == stable:
        return {p.name: stable for p in pods}
    k = min(canary_count, len(pods))
    wanted = sets[canary]

    def on_canary(p: PodAdapters) -> bool:
        return p.label == canary or (p.loaded is not None and _serves(p.loaded, wanted, sets))

    ordered = sorted(pods, key=lambda p: (not on_canary(p), p.name))
    chosen = {p.name for p in ordered[:k]}
    return {p.name: canary if p.name in chosen else stable for p in pods}


def _managed(sets: Mapping[str, AdapterSources]) -> set[str]:
    return {name for adapters in sets.values() for name in adapters}


def _serves(loaded: Mapping[str, str], wanted: AdapterSources,
            sets: Mapping[str, AdapterSources]) -> bool:
    """The pod's loaded adapters, among those the rollout manages, are exactly ``wanted``."""
    managed = _managed(sets)
    return {k: v for k, v in loaded.items() if k in managed} == dict(wanted)


def in_its_set(p: PodAdapters, sets: Mapping[str, AdapterSources]) -> str | None:
    """The set ``p`` is admitted to and serves exactly (its label, not stale, its managed
    adapters those of the set), or None: the pods a set's Service can count on."""
    if not (p.admitted and p.serving and not p.stale and p.label in sets and p.loaded is not None):
        return None
    assert p.label is not None
    return p.label if _serves(p.loaded, sets[p.label], sets) else None


def plan(pods: Sequence[PodAdapters], sets: Mapping[str, AdapterSources], stable: str,
         canary: str | None, canary_count: int, now: datetime,
         drain_seconds: float, drain_max_seconds: float | None = None) -> AdapterPlan:
    """The next moves toward ``canary_count`` pods on ``canary`` (the rest on ``stable``).

    ``sets``: set id → its adapters, for every set named by a target or a label (a label of a
    set not in ``sets`` is treated as wrong).  One pod at a time is taken out of the endpoints
    to be changed; a stale label is taken out at once, whatever else is out.  A pod drains
    ``drain_seconds``, then while it reports requests in flight (``busy``), up to
    ``drain_max_seconds`` from its eviction (None: the first only)."""
    want = targets(pods, sets, stable, canary, canary_count)
    managed = _managed(sets)
    moves: list[PodMove] = []
    in_place: dict[str, int] = {}
    wake: float | None = None
    # Pods out of the endpoints on the way to another set: one at a time, so a release never
    # takes more than one pod's capacity away (a pod that is down is not ours to count).
    draining = sum(1 for p in pods if p.serving and not p.admitted)
    for p in sorted(pods, key=lambda p: p.name):
        target = want[p.name]
        adapters = sets[target]
        correct = p.loaded is not None and _serves(p.loaded, adapters, sets)
        if in_its_set(p, sets) == target:
            in_place[target] = in_place.get(target, 0) + 1
            continue
        if not p.serving or p.loaded is None:
            continue  # nothing to talk to: the container's readiness keeps it out of endpoints
        if p.admitted:
            if p.stale or draining == 0:
                moves.append(Evict(p.name))
                draining += 1
            continue
        waited = ((now - p.moved_at).total_seconds()
                  if p.moved_at is not None else drain_seconds)
        left = _drain_left(p, waited, drain_seconds, drain_max_seconds)
        if left > 0:
            wake = left if wake is None else min(wake, left)
            continue
        if not correct:
            for name in sorted(adapters):
                if p.loaded.get(name) != adapters[name]:
                    moves.append(LoadAdapter(p.name, name, adapters[name]))
            for name in sorted(set(p.loaded) & managed - set(adapters)):
                moves.append(UnloadAdapter(p.name, name))
            continue  # read back before admitting
        moves.append(Admit(p.name, target, p.container_started_at))
    return AdapterPlan(want, tuple(moves), in_place, wake)

