"""What ``decide`` observes of a rollout with adapters: its serving versions (docs/adapters.md,
"How the wiring keeps decide as it is").

``decide`` treats a revision as an opaque key with a pod count.  Without adapters the key is the
template hash, and a revision's Deployment is its pods.  With adapters the key is a *serving
version* (template hash + adapter set, :func:`.adapter_plan.serving_version`), and several keys
can share one Deployment: an adapter release's canary runs on the stable's own pods.  This
module turns what the handler read (Deployments by template, each serving version's Service, and
the pods admitted to each set) into the ``revisions`` and ``templates`` of an
:class:`~.types.Observation`, so the rules of ``decide`` stay as they are:

* A Deployment's **owner** is the serving version whose pods it is: the stable's, if the stable
  runs on it, else the canary's (a template release with adapters).  The owner reports the
  Deployment's pod count (``desired``), and as ``ready`` the pods admitted to its set: "wait for
  Ready pods" becomes "wait for loaded, relabelled pods".
* Any other serving version of the stable's template is **in place** (:func:`in_place`, which
  ``decide`` asks against its status as it changes it): its ``desired`` is the pod count the
  decision last asked for (kept on its Service), its ``ready`` the pods admitted to its set.
  ``decide`` sizes it out of the fleet (``capacity.in_place_canary_pods``).
* A serving version of another template that owns nothing (an abandoned canary's) reports its
  Service's count and its admitted pods, so ``decide`` deletes it like any old revision.
* A Deployment no serving version runs on (the rollout's from before it had adapters) is a
  plain revision, keyed by its template hash, as without adapters.

Pure: the handler reads, this maps, ``decide`` decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..api.spec import MAX_ADAPTER_SOURCE, MAX_ADAPTERS
from ..api.status import MAX_ADAPTER_PODS, AdapterPod
from .adapter_plan import AdapterSources, PodAdapters, in_its_set
from .types import RevisionState


@dataclass(frozen=True)
class ServingVersionFacts:
    """One serving version as its Service records it."""

    #: The template hash of the Deployment whose pods it selects.
    template: str
    #: The adapter set its Service selects (the pods' ``adapter-set`` label value).
    adapter_set: str
    #: The pods the decision last asked for (``EnsureRevision``), for an in-place version.
    pods: int = 0
    #: False for the spec's own version before its Service exists: not yet a revision (decide
    #: asks for it), but already known to be in place or not.
    service: bool = True
    #: Its adapters (name -> source), which its set id is the hash of; None when the Service's
    #: record of them is missing or does not hash to its set (edited by hand): the planner then
    #: never loads that set, since it cannot know what it is.
    adapters: Mapping[str, str] | None = None


@dataclass(frozen=True)
class ServingVersionsSeen:
    revisions: dict[str, RevisionState]
    #: Serving version -> template hash, for ``Observation.templates``.
    templates: dict[str, str]


def in_place(templates: Mapping[str, str], stable: str | None, revision: str | None) -> bool:
    """``revision`` runs on the stable's pods: another serving version of the stable's template.
    Never true without adapters (no ``templates``), nor for the stable itself."""
    if revision is None or stable is None or revision == stable:
        return False
    template = templates.get(revision)
    return template is not None and template == templates.get(stable)


def shares_pods(templates: Mapping[str, str], revision: str) -> bool:
    """Another serving version runs on ``revision``'s template: an adapter release's two
    versions, whose pods are one Deployment's (none of them started for the release)."""
    template = templates.get(revision)
    return template is not None and any(
        t == template for rev, t in templates.items() if rev != revision)


def owners(versions: Mapping[str, ServingVersionFacts], stable: str | None,
           canary: str | None) -> dict[str, str]:
    """Template hash -> the serving version whose pods its Deployment's are: the stable's, else
    the canary's (a template release with adapters).  Other templates are abandoned."""
    out: dict[str, str] = {}
    for live in (canary, stable):  # the stable's claim wins: it is written last
        if live is not None and live in versions:
            out[versions[live].template] = live
    return out


def known_sets(versions: Mapping[str, ServingVersionFacts]) -> dict[str, dict[str, str]]:
    """Set id -> adapters, for every set whose Service records adapters that hash to it."""
    return {f.adapter_set: dict(f.adapters) for f in versions.values() if f.adapters is not None}


def observe(deployments: Mapping[str, RevisionState],
            versions: Mapping[str, ServingVersionFacts],
            admitted: Mapping[tuple[str, str], int],
            stable: str | None, canary: str | None) -> ServingVersionsSeen:
    """``deployments``: by template hash; ``versions``: by serving version (its Service, or the
    spec's own before its Service exists); ``admitted``: pods admitted and in place, by
    (template hash, adapter set); ``stable``/``canary``: the status' serving versions."""
    owned = owners(versions, stable, canary)
    out: dict[str, RevisionState] = {}
    for name, facts in versions.items():
        pods = admitted.get((facts.template, facts.adapter_set), 0)
        deployment = deployments.get(facts.template)
        if owned.get(facts.template) == name and deployment is not None:
            out[name] = replace(deployment, ready=pods, available=pods)
            continue
        if not facts.service:
            continue  # not created yet: decide asks for it
        out[name] = RevisionState(
            desired=facts.pods, ready=pods, available=pods,
            port=deployment.port if deployment else None,
            args=deployment.args if deployment else None)
    # A Deployment no serving version runs on is a revision from before the rollout had
    # adapters (or whose Services were lost): a plain revision, seen as without adapters, so
    # decide keeps it (the stable) or scales it away like any old revision.
    used = {f.template for f in versions.values()}
    for template, deployment in deployments.items():
        if template not in used:
            out.setdefault(template, deployment)
    return ServingVersionsSeen(out, {name: f.template for name, f in versions.items()})


def adapter_pods(pods: Sequence[PodAdapters], sets: Mapping[str, AdapterSources],
                 version_of_set: Mapping[str, str]) -> list[AdapterPod]:
    """``status.adapterPods``: each pod, the serving version whose Service selects it by its
    label (none while it is moved or new), and the managed adapters its own ``/v1/models``
    lists: what it serves, not what it was asked to load, so a pod restarted under its label
    shows its Service's version with no adapter until the planner takes it out.  By name; at
    most ``MAX_ADAPTER_PODS``, and per pod the status schema's bounds: the first
    ``2 * MAX_ADAPTERS`` names (the stable's and the canary's sets), and a source longer than
    any the spec accepts (what a pod reports is its own) cut with ``…``."""
    managed = {name for adapters in sets.values() for name in adapters}
    out = []
    for p in sorted(pods, key=lambda p: p.name)[:MAX_ADAPTER_PODS]:
        version = version_of_set.get(p.label) if p.admitted and p.label else None
        ours = sorted((k, v) for k, v in (p.loaded or {}).items() if k in managed)
        loaded = None if p.loaded is None else {
            k: _bounded_source(v) for k, v in ours[:2 * MAX_ADAPTERS]}
        out.append(AdapterPod(pod=p.name, version=version, adapters=loaded))
    return out


def _bounded_source(source: str) -> str:
    return (source if len(source) <= MAX_ADAPTER_SOURCE
            else source[:MAX_ADAPTER_SOURCE - 1] + "…")


@dataclass(frozen=True)
class PodTargets:
    """What the adapter planner (``adapter_plan.plan``) is to move one Deployment's pods to."""

    #: The set every pod not on the canary serves (the owner's).
    stable_set: str
    #: An in-place canary's set and how many pods it is to have (None, 0: no canary here).
    canary_set: str | None
    canary_pods: int
    #: Set id -> adapters, for every set the planner may meet on these pods.
    sets: dict[str, dict[str, str]]


def pod_targets(versions: Mapping[str, ServingVersionFacts], stable: str | None,
                canary: str | None, asked: Mapping[str, int]) -> dict[str, PodTargets | str]:
    """Per template with an owner (the stable's, else the canary's template), the planner's
    targets, or why none can be given.  ``asked``: pod counts decided in this reconcile (the
    decision's ``EnsureRevision``), which win over the counts the Services recorded.

    A set whose adapters are unknown (its Service's record missing or edited) is never a
    target: its pods stay as they are and the reason is returned, because loading a guess
    could put a pod in a Service while it serves another version."""
    sets = known_sets(versions)
    templates = {v: f.template for v, f in versions.items()}
    out: dict[str, PodTargets | str] = {}
    for template, owner in owners(versions, stable, canary).items():
        facts = versions[owner]
        moved = canary if owner == stable and in_place(templates, stable, canary) else None
        wanted = [facts] + ([versions[moved]] if moved is not None else [])
        unknown = [f.adapter_set for f in wanted if f.adapter_set not in sets]
        if unknown:
            out[template] = (f"adapter set {unknown[0]}: its Service does not record adapters "
                             "that hash to it; its pods are left as they are")
            continue
        count = 0 if moved is None else asked.get(moved, versions[moved].pods)
        out[template] = PodTargets(facts.adapter_set,
                                   None if moved is None else versions[moved].adapter_set,
                                   count, sets)
    return out


def admitted_counts(pods_by_template: Mapping[str, Sequence[PodAdapters]],
                    sets: Mapping[str, AdapterSources]) -> dict[tuple[str, str], int]:
    """Pods each (template, set) can count on: admitted, serving, not stale, and serving
    exactly their set (``adapter_plan.in_its_set``, the planner's own test) -- the ``ready``
    of the serving versions :func:`observe` reports."""
    out: dict[tuple[str, str], int] = {}
    for template, pods in pods_by_template.items():
        for p in pods:
            adapter_set = in_its_set(p, sets)
            if adapter_set is not None:
                out[(template, adapter_set)] = out.get((template, adapter_set), 0) + 1
    return out
