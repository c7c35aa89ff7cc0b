"""Create, scale, observe and delete the Deployment and Service (and, with InferencePool
backends, the InferencePool) of each revision.

A revision's pod template never changes after its Deployment is created (a change is a new
revision), so ``ensure`` creates the objects once and afterwards only patches ``replicas``: a
promotion relabels which revision is stable and never restarts a pod.  Pods carry the rollout and
revision labels, so PromQL (by pod name) and kubectl (by label) can select one revision.
"""

from __future__ import annotations

import copy
from typing import Any

from ..api import (
    API_VERSION,
    KIND,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    LABEL_ROLLOUT,
    MANAGED_BY,
    POOL_GROUP,
    POOL_PLURAL,
    POOL_VERSION,
)
from ..api.spec import GatewayAPITraffic, PodTemplate
from ..core.revision import revision_name
from ..core.types import RevisionState
from ..kube import Kube, KubeError, ns_path


class RevisionError(Exception):
    """A revision object could not be written; the message names it."""


def revision_labels(rollout: str, revision: str) -> dict[str, str]:
    return {LABEL_ROLLOUT: rollout, LABEL_REVISION: revision}


def owner_reference(rollout: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": rollout, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def deployment_body(namespace: str, rollout: str, uid: str, revision: str,
                    template: PodTemplate, replicas: int) -> dict[str, Any]:
    labels = revision_labels(rollout, revision)
    pod_meta = copy.deepcopy(template.metadata)
    pod_meta["labels"] = {**pod_meta.get("labels", {}), **labels}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": revision_name(rollout, revision), "namespace": namespace,
            "labels": {**labels, LABEL_MANAGED_BY: MANAGED_BY},
            "ownerReferences": [owner_reference(rollout, uid)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            # A GPU pod must not be doubled during its own rollout: replace, never surge.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": pod_meta, "spec": copy.deepcopy(template.spec)},
        },
    }


def service_body(namespace: str, rollout: str, uid: str, revision: str,
                 port: int) -> dict[str, Any]:
    labels = revision_labels(rollout, revision)
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": revision_name(rollout, revision), "namespace": namespace,
            "labels": {**labels, LABEL_MANAGED_BY: MANAGED_BY},
            "ownerReferences": [owner_reference(rollout, uid)],
        },
        "spec": {"selector": labels,
                 "ports": [{"name": "http", "port": port, "targetPort": port}]},
    }


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
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {**labels, LABEL_MANAGED_BY: MANAGED_BY},
            "ownerReferences": [owner_reference(rollout, uid)],
        },
        "spec": spec,
    }


class Revisions:
    """The revisions of one rollout."""

    def __init__(self, kube: Kube, namespace: str, rollout: str, uid: str,
                 traffic: GatewayAPITraffic | None = None) -> None:
        self.kube, self.namespace, self.rollout, self.uid = kube, namespace, rollout, uid
        #: Set when each revision is also an InferencePool (``backendKind: InferencePool``).
        self.pools = traffic if traffic is not None and traffic.backend_kind == "InferencePool" \
            else None
        #: Pod templates of the revisions seen by :meth:`observe` (the stable's args feed lints).
        self.templates: dict[str, dict[str, Any]] = {}

    def _deploy_path(self, revision: str = "") -> str:
        name = revision_name(self.rollout, revision) if revision else ""
        return ns_path("apps", "v1", self.namespace, "deployments", name)

    def _svc_path(self, revision: str = "") -> str:
        name = revision_name(self.rollout, revision) if revision else ""
        return ns_path("", "v1", self.namespace, "services", name)

    def _pool_path(self, revision: str = "") -> str:
        name = revision_name(self.rollout, revision) if revision else ""
        return ns_path(POOL_GROUP, POOL_VERSION, self.namespace, POOL_PLURAL, name)

    async def observe(self) -> dict[str, RevisionState]:
        """Each revision's desired/ready/available pods, and pods no node can take."""
        selector = {"labelSelector": f"{LABEL_ROLLOUT}={self.rollout}"}
        deployments = await self.kube.get(self._deploy_path(), params=selector)
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
            self.templates[rev] = d["spec"].get("template", {})
            out[rev] = RevisionState(
                desired=int(d["spec"].get("replicas", 1)),
                ready=int(st.get("readyReplicas", 0)),
                available=int(st.get("availableReplicas", 0)),
                unschedulable=stuck.get(rev, 0),
            )
        return out

    async def ensure(self, revision: str, replicas: int, template: PodTemplate | None,
                     template_revision: str) -> None:
        """Scale the revision's Deployment, creating it (and its Service) if missing.  A missing
        revision can only be created from the spec's template, i.e. when it is the spec's one."""
        try:
            await self.kube.merge_patch(self._deploy_path(revision),
                                        {"spec": {"replicas": replicas}})
        except KubeError as e:
            if e.status != 404:
                raise RevisionError(f"scaling Deployment {self._name(revision)}: {e}") from e
            if template is None or revision != template_revision:
                raise RevisionError(
                    f"Deployment {self._name(revision)} is gone and its template is no longer in "
                    "the spec; recreate it by re-applying that template, or change the template "
                    "to start a new release") from e
            await self._create(revision, replicas, template)
        if replicas > 0 and template is not None and revision == template_revision:
            await self._ensure_service(revision, template.serving_port())
            if self.pools is not None:
                await self._ensure_pool(revision, template.serving_port(), self.pools)

    async def _create(self, revision: str, replicas: int, template: PodTemplate) -> None:
        body = deployment_body(self.namespace, self.rollout, self.uid, revision, template, replicas)
        try:
            await self.kube.create(self._deploy_path(), body)
        except KubeError as e:
            if e.status != 409:
                raise RevisionError(f"creating Deployment {self._name(revision)}: {e}") from e

    async def _ensure_service(self, revision: str, port: int) -> None:
        if await self.kube.get_or_none(self._svc_path(revision)) is not None:
            return
        body = service_body(self.namespace, self.rollout, self.uid, revision, port)
        try:
            await self.kube.create(self._svc_path(), body)
        except KubeError as e:
            if e.status != 409:
                raise RevisionError(f"creating Service {self._name(revision)}: {e}") from e

    async def _ensure_pool(self, revision: str, port: int, traffic: GatewayAPITraffic) -> None:
        """Created before the revision's first weight, like its Service (the route names it)."""
        what = f"InferencePool {self._name(revision)}"
        try:
            if await self.kube.get_or_none(self._pool_path(revision)) is not None:
                return
            await self.kube.create(self._pool_path(), pool_body(
                self.namespace, self.rollout, self.uid, revision, port, traffic))
        except KubeError as e:
            if e.status == 409:
                return
            if e.status == 404:
                raise RevisionError(
                    f"creating {what}: the InferencePool CRD ({POOL_GROUP}/{POOL_VERSION}) is "
                    "not installed; install the Gateway API Inference Extension CRDs, or set "
                    "spec.traffic.gatewayAPI.backendKind: Service") from e
            raise RevisionError(f"creating {what}: {e}") from e

    def serving_args(self, revision: str | None) -> tuple[str, ...] | None:
        """The vLLM args of an observed revision (None if it was not seen)."""
        template = self.templates.get(revision or "")
        if not template:
            return None
        try:
            return tuple(PodTemplate.model_validate(template).serving_args())
        except ValueError:
            return None

    async def delete(self, revision: str) -> None:
        await self.kube.delete(self._deploy_path(revision))
        await self.kube.delete(self._svc_path(revision))
        if self.pools is not None:
            await self.kube.delete(self._pool_path(revision))

    def _name(self, revision: str) -> str:
        return f"{self.namespace}/{revision_name(self.rollout, revision)}"
