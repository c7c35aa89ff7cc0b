"""Create, scale, observe and delete the Deployment and Service (and, with InferencePool
backends, the InferencePool) of each revision.

A revision's pod template never changes after its Deployment is created (a change is a new
revision), so ``ensure`` creates the objects once and afterwards only patches ``replicas``: a
promotion relabels which revision is stable and never restarts a pod.  Pods carry the rollout and
revision labels, so PromQL (by pod name) and kubectl (by label) can select one revision.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ..api import (
    ADAPTER_SET_PENDING,
    ANN_SERVING_ADAPTERS,
    ANN_SERVING_PODS,
    ANN_SERVING_TEMPLATE,
    API_VERSION,
    KIND,
    LABEL_ADAPTER_SET,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    LABEL_ROLLOUT,
    MANAGED_BY,
    POOL_GROUP,
    POOL_PLURAL,
    POOL_VERSION,
)
from ..api.spec import GatewayAPITraffic, PodTemplate
from ..core.adapter_plan import set_id
from ..core.revision import revision_name
from ..core.serving_versions import ServingVersionFacts
from ..core.types import RevisionState
from ..kube import KubeError
from ..kube_protocol import KubeClient
from ..paths import ApiPath, ns_path


class RevisionError(Exception):
    """A revision object could not be written; the message names it."""


def revision_labels(rollout: str, revision: str) -> dict[str, str]:
    return {LABEL_ROLLOUT: rollout, LABEL_REVISION: revision}


def owner_reference(rollout: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": rollout, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def revision_metadata(namespace: str, rollout: str, uid: str, revision: str) -> dict[str, Any]:
    """Name, labels and owner of every object of a revision (Deployment, Service, pool)."""
    return {
        "name": revision_name(rollout, revision), "namespace": namespace,
        "labels": {**revision_labels(rollout, revision), LABEL_MANAGED_BY: MANAGED_BY},
        "ownerReferences": [owner_reference(rollout, uid)],
    }


def deployment_body(namespace: str, rollout: str, uid: str, revision: str,
                    template: PodTemplate, replicas: int,
                    adapters: bool = False) -> dict[str, Any]:
    """``adapters``: the rollout serves LoRA adapters, so every new pod starts labelled
    ``pending`` (no Service selects it) until the operator has loaded its set and admitted it
    (docs/adapters.md).  The label is not in the selector: relabelling a pod keeps it the
    ReplicaSet's."""
    labels = revision_labels(rollout, revision)
    pod_meta = copy.deepcopy(template.metadata)
    pending = {LABEL_ADAPTER_SET: ADAPTER_SET_PENDING} if adapters else {}
    pod_meta["labels"] = {**pod_meta.get("labels", {}), **labels, **pending}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": revision_metadata(namespace, rollout, uid, revision),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            # A GPU pod must not be doubled during its own rollout: replace, never surge.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": pod_meta, "spec": copy.deepcopy(template.spec)},
        },
    }


def service_body(namespace: str, rollout: str, uid: str, revision: str,
                 port: int, adapter_set: str | None = None) -> dict[str, Any]:
    """``adapter_set``: the Service selects only the revision's pods admitted to that set (a
    pod being moved, or new, is in no Service's endpoints)."""
    labels = revision_labels(rollout, revision)
    selector = {**labels, LABEL_ADAPTER_SET: adapter_set} if adapter_set else labels
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": revision_metadata(namespace, rollout, uid, revision),
        "spec": {"selector": selector,
                 "ports": [{"name": "http", "port": port, "targetPort": port}]},
    }


def version_service_body(namespace: str, rollout: str, uid: str, version: str,
                         facts: ServingVersionFacts, port: int) -> dict[str, Any]:
    """A serving version's Service (a rollout with adapters): named and labelled by the
    version (the route's backend, the status' key), selecting its template's pods admitted to
    its set, and recording both and the pods last asked for (read back by
    :func:`versions_from_services`)."""
    body = service_body(namespace, rollout, uid, facts.template, port, facts.adapter_set)
    body["metadata"] = revision_metadata(namespace, rollout, uid, version)
    body["metadata"]["annotations"] = {
        ANN_SERVING_TEMPLATE: facts.template, ANN_SERVING_PODS: str(facts.pods),
        ANN_SERVING_ADAPTERS: json.dumps(dict(sorted((facts.adapters or {}).items())))}
    return body


#: The longest adapters record read (the spec allows 8 adapters of a 128-character name and a
#: 1,024-character source: about 9.3 KB of JSON); a longer one was not written by the operator.
MAX_RECORDED_ADAPTERS = 16 * 1024
#: The longest pod count read: more digits than any fleet (and than ``int()`` accepts at all).
MAX_POD_COUNT_DIGITS = 6


def _recorded_adapters(text: Any, adapter_set: str) -> dict[str, str] | None:
    """The adapters a Service records, only if they hash to the set it selects.  Annotations
    are the tenant's to edit: bounded before parsing, and nesting JSON cannot overflow."""
    if not isinstance(text, str) or len(text) > MAX_RECORDED_ADAPTERS:
        return None
    try:
        adapters = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(adapters, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in adapters.items()):
        return None
    return adapters if set_id(adapters) == adapter_set else None


def versions_from_services(items: list[dict[str, Any]]) -> dict[str, ServingVersionFacts]:
    """The serving versions among a rollout's Services (those with a template annotation and
    an adapter-set selector), by version.  A count a person edited into something else reads
    as 0 pods asked for: the next ``EnsureRevision`` writes it again."""
    out: dict[str, ServingVersionFacts] = {}
    for svc in items:
        meta = svc.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        version = (meta.get("labels") or {}).get(LABEL_REVISION)
        template = annotations.get(ANN_SERVING_TEMPLATE)
        adapter_set = ((svc.get("spec") or {}).get("selector") or {}).get(LABEL_ADAPTER_SET)
        if not (version and template and adapter_set) or meta.get("deletionTimestamp"):
            continue
        pods = str(annotations.get(ANN_SERVING_PODS, ""))
        counted = pods.isascii() and pods.isdigit() and len(pods) <= MAX_POD_COUNT_DIGITS
        out[version] = ServingVersionFacts(
            template, adapter_set, int(pods) if counted else 0,
            adapters=_recorded_adapters(annotations.get(ANN_SERVING_ADAPTERS), adapter_set))
    return out


def pool_body(namespace: str, rollout: str, uid: str, revision: str, port: int,
              traffic: GatewayAPITraffic) -> dict[str, Any]:
    """The revision's InferencePool: its pods (the Service's selector) on the serving port."""
    labels = revision_labels(rollout, revision)
    name = revision_name(rollout, revision)
    spec: dict[str, Any] = {"selector": {"matchLabels": labels},
                            "targetPorts": [{"number": port}]}
    if traffic.endpoint_picker_ref is not None:
        spec["endpointPickerRef"] = traffic.endpoint_picker_ref.for_pool(name)
    return {
        "apiVersion": f"{POOL_GROUP}/{POOL_VERSION}", "kind": "InferencePool",
        "metadata": revision_metadata(namespace, rollout, uid, revision),
        "spec": spec,
    }


#: (group, version, plural) of each kind of object a revision has.
RESOURCES: dict[str, tuple[str, str, str]] = {
    "Deployment": ("apps", "v1", "deployments"),
    "Service": ("", "v1", "services"),
    "InferencePool": (POOL_GROUP, POOL_VERSION, POOL_PLURAL),
}

#: Why creating an InferencePool can answer 404, and what to do.
NO_POOL_CRD = (f"the InferencePool CRD ({POOL_GROUP}/{POOL_VERSION}) is not installed; install the "
               "Gateway API Inference Extension CRDs, or set "
               "spec.traffic.gatewayAPI.backendKind: Service")


def _serving(template: dict[str, Any]) -> tuple[int | None, tuple[str, ...] | None]:
    """The serving port and vLLM argv of a revision's pod template, as its Deployment holds it
    (None for what cannot be read: such a revision is never the spec's own)."""
    try:
        parsed = PodTemplate.model_validate(template)
    except ValueError:
        return None, None
    try:
        port: int | None = parsed.serving_port()
    except ValueError:
        port = None
    try:
        args: tuple[str, ...] | None = tuple(parsed.serving_args())
    except ValueError:
        args = None
    return port, args


class Revisions:
    """The revisions of one rollout."""

    def __init__(self, kube: KubeClient, namespace: str, rollout: str, uid: str,
                 traffic: GatewayAPITraffic | None = None) -> None:
        self.kube, self.namespace, self.rollout, self.uid = kube, namespace, rollout, uid
        #: Set when each revision is also an InferencePool (``backendKind: InferencePool``).
        self.pools = traffic if traffic is not None and traffic.backend_kind == "InferencePool" \
            else None

    def _path(self, kind: str, revision: str = "") -> ApiPath:
        """The collection of ``kind`` in the namespace, or the revision's object in it."""
        group, version, plural = RESOURCES[kind]
        name = revision_name(self.rollout, revision) if revision else None
        return ns_path(group, version, self.namespace, plural, name)

    async def observe(self) -> dict[str, RevisionState]:
        """Each revision's desired/ready/available pods, and pods no node can take."""
        selector = {"labelSelector": f"{LABEL_ROLLOUT}={self.rollout}"}
        deployments = await self.kube.get(self._path("Deployment"), params=selector)
        pods = await self.kube.get(ns_path("", "v1", self.namespace, "pods"), params={
            **selector, "fieldSelector": "status.phase=Pending"})
        stuck: dict[str, int] = {}
        for pod in pods.get("items", []):
            rev = pod["metadata"].get("labels", {}).get(LABEL_REVISION)
            conds = pod.get("status", {}).get("conditions") or []
            if rev and any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                           and c.get("reason") == "Unschedulable" for c in conds):
                stuck[rev] = stuck.get(rev, 0) + 1
        out: dict[str, RevisionState] = {}
        for d in deployments.get("items", []):
            rev = d["metadata"].get("labels", {}).get(LABEL_REVISION)
            if not rev or d["metadata"].get("deletionTimestamp"):
                continue
            st = d.get("status", {})
            port, args = _serving(d["spec"].get("template", {}))
            out[rev] = RevisionState(
                desired=int(d["spec"].get("replicas", 1)),
                ready=int(st.get("readyReplicas", 0)),
                available=int(st.get("availableReplicas", 0)),
                unschedulable=stuck.get(rev, 0),
                port=port,
                args=args,
            )
        return out

    async def observe_versions(self) -> dict[str, ServingVersionFacts]:
        """A rollout with adapters: its serving versions, from their Services."""
        listing = await self.kube.get(self._path("Service"), params={
            "labelSelector": f"{LABEL_ROLLOUT}={self.rollout}"})
        return versions_from_services(listing.get("items") or [])

    async def ensure_version(self, version: str, facts: ServingVersionFacts, port: int) -> None:
        """Create the serving version's Service, or record the pods now asked of it.  Never a
        Deployment: its pods are its template's, moved by the adapter planner."""
        path = self._path("Service", version)
        if await self.kube.get_or_none(path) is None:
            await self._create_once("Service", version, version_service_body(
                self.namespace, self.rollout, self.uid, version, facts, port))
            return
        try:
            await self.kube.merge_patch(path, {"metadata": {"annotations": {
                ANN_SERVING_PODS: str(facts.pods)}}})
        except KubeError as e:
            if e.status != 404:  # deleted meanwhile: the next reconcile creates it
                raise RevisionError(f"recording pods on Service {self._name(version)}: {e}") \
                    from e

    async def orphan(self, revision: str, kinds: tuple[str, ...] | None = None) -> None:
        """Drop the owner reference of the revision's Deployment and Service (and pool), or of
        its ``kinds`` only, so garbage collection leaves them to the user's route when the
        rollout goes."""
        for kind in kinds or self._kinds():
            try:
                await self.kube.merge_patch(self._path(kind, revision), {"metadata": {
                    "ownerReferences": None, "labels": {LABEL_REVISION: revision}}})
            except KubeError as e:
                if e.status != 404:
                    raise RevisionError(f"orphaning {kind} {self._name(revision)}: {e}") from e

    async def ensure(self, revision: str, replicas: int, template: PodTemplate | None,
                     template_revision: str, *, adapters: bool = False) -> None:
        """Scale the revision's Deployment, creating it (and its Service) if missing.  A missing
        revision can only be created from the spec's template, i.e. when it is the spec's one.

        The Service (and pool) are created *before* the Deployment: the core asks for a
        revision only while its Deployment is missing or at another size, so a crash between
        the two creations must leave the Deployment missing, not the Service (the sandbox's
        chaos run found canaries whose Service never came, the gateway answering their share
        with 500 and ``BackendNotFound``).

        ``adapters``: a rollout with adapters, whose Services are its serving versions'
        (:meth:`ensure_version`, written first): the template's own Service, which would
        select its pods whatever set they serve, is never made, and new pods start ``pending``."""
        try:
            await self.kube.merge_patch(self._path("Deployment", revision),
                                        {"spec": {"replicas": replicas}})
        except KubeError as e:
            if e.status != 404:
                raise RevisionError(f"scaling Deployment {self._name(revision)}: {e}") from e
            if template is None or revision != template_revision:
                raise RevisionError(
                    f"Deployment {self._name(revision)} is gone and its template is no longer in "
                    "the spec; recreate it by re-applying that template, or change the template "
                    "to start a new release") from e
            if not adapters:
                await self._ensure_backends(revision, template)
            await self._create_once("Deployment", revision, deployment_body(
                self.namespace, self.rollout, self.uid, revision, template, replicas, adapters))
            return
        if replicas > 0 and template is not None and revision == template_revision \
                and not adapters:
            await self._ensure_backends(revision, template)

    async def _ensure_backends(self, revision: str, template: PodTemplate) -> None:
        """The revision's Service (and InferencePool): what the route names as its backend."""
        port = template.serving_port()
        await self._ensure_exists("Service", revision, service_body(
            self.namespace, self.rollout, self.uid, revision, port))
        if self.pools is not None:  # created before the first weight: the route names it
            await self._ensure_exists("InferencePool", revision, pool_body(
                self.namespace, self.rollout, self.uid, revision, port, self.pools),
                if_no_api=NO_POOL_CRD)

    async def _ensure_exists(self, kind: str, revision: str, body: dict[str, Any],
                             if_no_api: str = "") -> None:
        if await self.kube.get_or_none(self._path(kind, revision)) is None:
            await self._create_once(kind, revision, body, if_no_api)

    async def _create_once(self, kind: str, revision: str, body: dict[str, Any],
                           if_no_api: str = "") -> None:
        """Create the revision's ``kind``; one created meanwhile (409) is the same object.
        ``if_no_api`` explains a 404 (the kind's API is not served)."""
        try:
            await self.kube.create(self._path(kind), body)
        except KubeError as e:
            if e.status == 409:
                return
            why = if_no_api if e.status == 404 and if_no_api else str(e)
            raise RevisionError(f"creating {kind} {self._name(revision)}: {why}") from e

    async def delete(self, revision: str, kinds: tuple[str, ...] | None = None) -> None:
        for kind in kinds or self._kinds():
            await self.kube.delete(self._path(kind, revision))

    def _kinds(self) -> tuple[str, ...]:
        """The kinds of object every revision has."""
        return ("Deployment", "Service") + (("InferencePool",) if self.pools is not None else ())

    def _name(self, revision: str) -> str:
        return f"{self.namespace}/{revision_name(self.rollout, revision)}"
