"""What the reconciler reads of a rollout with adapters before it decides (docs/adapters.md,
"Still to build", the *observe* step): Deployments by template, serving versions from their
Services, and the pods of the live templates with what each serves, mapped by
:mod:`..core.serving_versions` into the revisions ``decide`` sees."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..api import LABEL_REVISION, LABEL_ROLLOUT
from ..core import serving_versions
from ..core.adapter_plan import serving_version, set_id
from ..core.serving_versions import ServingVersionFacts, ServingVersionsSeen
from ..core.types import RevisionState
from .adapter_pods import AdapterPods, ObservedPod
from .revisions import Revisions


@dataclass(frozen=True)
class AdapterWorld:
    seen: ServingVersionsSeen
    #: Every serving version, the spec's own among them (``service=False`` before its Service).
    versions: dict[str, ServingVersionFacts]
    #: The pods of the stable's and the canary's templates, by template, then by pod name.
    pods: dict[str, dict[str, ObservedPod]]
    spec_version: str
    #: The rollout's Deployments, by template hash.
    deployments: dict[str, RevisionState]


async def observe(revisions: Revisions, pods: AdapterPods, rollout: str, spec_template: str,
                  spec_adapters: Mapping[str, str], stable: str | None,
                  canary: str | None) -> AdapterWorld:
    deployments = await revisions.observe()
    versions = await revisions.observe_versions()
    spec_version = serving_version(spec_template, spec_adapters)
    versions.setdefault(spec_version, ServingVersionFacts(
        spec_template, set_id(spec_adapters), service=False, adapters=dict(spec_adapters)))
    observed: dict[str, dict[str, ObservedPod]] = {}
    for template in sorted(serving_versions.owners(versions, stable, canary)):
        deployment = deployments.get(template)
        if deployment is None or deployment.port is None:
            continue  # gone, or a template whose serving port cannot be read: nothing to ask
        observed[template] = await pods.observe(
            {LABEL_ROLLOUT: rollout, LABEL_REVISION: template}, deployment.port)
    sets = serving_versions.known_sets(versions)
    admitted = serving_versions.admitted_counts(
        {t: [o.adapters for o in by_name.values()] for t, by_name in observed.items()}, sets)
    seen = serving_versions.observe(deployments, versions, admitted, stable, canary)
    return AdapterWorld(seen, versions, observed, spec_version, deployments)
