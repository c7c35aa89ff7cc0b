"""The chart installed by an Argo CD Application (docs/gitops.md, section 1): Argo CD's repo
server renders charts/inference-rollout with Helm, and the application controller applies it
server-side (the CRD is too large for a client-side apply's last-applied annotation)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from irsandbox.cluster import Cluster
from irsandbox.common import wait_for

from .conftest import ArgoCD

pytestmark = [pytest.mark.gitops, pytest.mark.timeout(300)]

CHART = Path(__file__).resolve().parents[2] / "charts" / "inference-rollout"
CRD = "inferencerollouts.rollouts.inference.dev"


def test_the_chart_is_synced_server_side_and_healthy(argocd: ArgoCD, cluster: Cluster,
                                                     namespace: str, tmp_path: Path) -> None:
    # Given the chart in git
    name = f"{namespace}-chart"
    repo = argocd.repository(name, tmp_path / "work")
    shutil.copytree(CHART, tmp_path / "work" / "chart")
    repo.commit({}, "the chart")
    values: dict[str, Any] = {"watch": {"mode": "namespaces", "namespaces": [namespace]},
                              "rbac": {"kopfScanning": False}}
    # When an Application installs it with server-side apply
    argocd.apply_app({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {"project": "default",
                 "source": {"repoURL": repo.url, "targetRevision": "main", "path": "chart",
                            "helm": {"releaseName": "ir", "valuesObject": values}},
                 "destination": {"name": "sandbox", "namespace": namespace},
                 "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                                "syncOptions": ["ServerSideApply=true"]}}})
    try:
        # Then it is Synced and Healthy (the operator's Deployment available on the sandbox's
        # KWOK nodes: a pod the sandbox runs no process for; the operator the other tests use
        # runs as a process)
        def state() -> tuple[str, str] | None:
            st = argocd.app(name).get("status") or {}
            now = (st.get("sync", {}).get("status", ""), st.get("health", {}).get("status", ""))
            return now if now == ("Synced", "Healthy") else None
        wait_for(state, 180, f"Application {name} Synced and Healthy", interval=1)
        # rendered by Helm with the Application's values, applied by Argo CD server-side
        dep = cluster.apps.read_namespaced_deployment("ir-inference-rollout", namespace)
        args = dep.spec.template.spec.containers[0].args
        assert args[args.index("--namespace") + 1] == namespace, args
        managers = {f.manager: f.operation for f in dep.metadata.managed_fields or []}
        assert managers.get("argocd-controller") == "Apply", managers
        crd = cluster.ext.read_custom_resource_definition(CRD)
        crd_managers = {f.manager: f.operation for f in crd.metadata.managed_fields or []}
        assert crd_managers.get("argocd-controller") == "Apply", crd_managers
        assert "kubectl.kubernetes.io/last-applied-configuration" not in (
            crd.metadata.annotations or {})
    finally:
        argocd.delete_app(name)  # without Argo CD's resources finalizer: the CRD stays
