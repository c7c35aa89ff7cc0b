"""The GitOps tier (issue 32, docs/gitops.md): a real Argo CD on the sandbox syncs rollouts from a
git repository served on loopback, with the operator running as a process.

Argo CD is opt-in (`bash sandbox/build.sh argocd`, ≈ 12–25 min on 2 cores): `make test-gitops`
builds it, starts it with sandbox/argocd-up.sh and runs this tier. A sandbox without it FAILS
here, naming the command: this tier is the only proof of the GitOps path, and a skip would hide
that it never ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from irsandbox.cluster import Cluster
from irsandbox.common import free_port, state_dir
from irsandbox.harness import OperatorProcess

APP_GROUP = ("argoproj.io", "v1alpha1", "applications")


class ArgoCD:
    """Argo CD as sandbox/argocd-up.sh started it: Applications, and git repositories."""

    def __init__(self, cluster: Cluster) -> None:
        env_file = state_dir() / "argocd" / "env"
        if not env_file.exists():
            pytest.fail("Argo CD is not running on this sandbox: bash sandbox/build.sh argocd && "
                        "bash sandbox/argocd-up.sh (make test-gitops does both)")
        self.env = dict(line.split("=", 1) for line in env_file.read_text().split())
        self.cluster = cluster
        self.git_root = Path(self.env["ARGOCD_GIT_ROOT"])

    # --- git ---

    def repository(self, name: str, work: Path) -> GitRepo:
        bare = self.git_root / f"{name}.git"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
        return GitRepo(work, f"{self.env['ARGOCD_GIT_URL']}/{name}.git")

    # --- Applications ---

    def apply_app(self, app: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts",
                "--field-manager", "gitops-tests", "-f", "-", stdin=json.dumps(app))

    def app(self, name: str) -> dict[str, Any]:
        return dict(self.cluster.custom.get_namespaced_custom_object(
            APP_GROUP[0], APP_GROUP[1], "argocd", APP_GROUP[2], name))

    def refresh(self, name: str) -> None:
        """Ask for a refresh now (what the UI's Refresh does), instead of waiting for the resync."""
        self.cluster.custom.patch_namespaced_custom_object(
            APP_GROUP[0], APP_GROUP[1], "argocd", APP_GROUP[2], name,
            {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}})

    def delete_app(self, name: str) -> None:
        self.cluster.kubectl("delete", "application", "-n", "argocd", name, "--wait=false",
                "--ignore-not-found")

    def resource_health(self, app: str, kind: str, name: str) -> dict[str, str]:
        """A resource's health as Argo CD computed it (its health check, in the Application's
        resource tree: Argo CD 3 no longer copies it into the Application by default)."""
        r = httpx.get(f"http://{self.env['ARGOCD_SERVER']}/api/v1/applications/{app}/"
                      "resource-tree", timeout=30)
        r.raise_for_status()
        for node in r.json().get("nodes") or []:
            if node.get("kind") == kind and node.get("name") == name:
                return dict(node.get("health") or {})
        return {}

    def cli(self, *args: str) -> str:
        """``argocd …`` through the sandbox's Argo CD API server (no logins: --disable-auth)."""
        r = subprocess.run([self.env["ARGOCD_BIN"], "--server", self.env["ARGOCD_SERVER"],
                            "--plaintext", "--auth-token", "none", *args],
                           env={**os.environ, "HOME": str(state_dir() / "argocd")},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"argocd {' '.join(args)}: {r.stderr or r.stdout}"
        return r.stdout


class GitRepo:
    """A working copy that pushes to a bare repository the git daemon serves."""

    def __init__(self, work: Path, url: str) -> None:
        self.work, self.url = work, url
        work.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("remote", "add", "origin", url)

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=tests", "-c", "user.email=t@example",
                               *args], cwd=self.work, check=True, capture_output=True,
                              text=True).stdout

    def commit(self, files: dict[str, str], message: str) -> str:
        for path, text in files.items():
            (self.work / path).parent.mkdir(parents=True, exist_ok=True)
            (self.work / path).write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        self.git("push", "-q", "origin", "main")
        return self.git("rev-parse", "HEAD").strip()


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    c = Cluster()
    c.install_crd()
    return c


@pytest.fixture(scope="session")
def argocd(cluster: Cluster) -> ArgoCD:
    return ArgoCD(cluster)


@pytest.fixture(scope="session")
def operator_process(cluster: Cluster) -> Iterator[OperatorProcess]:
    op = OperatorProcess(cluster.env, log_name="operator-gitops", namespaces=["gitops-*"],
                         metrics_port=free_port(), liveness_port=free_port())
    op.start()
    yield op
    op.stop()
    # A namespace deleted just before the operator stopped keeps its rollouts' finalizers
    # (found Terminating 38 min after a run): finish them as the uninstall docs say.
    left = cluster.finish_deletions("gitops-")
    assert not left, f"namespaces still Terminating after release-finalizers: {left}"


@pytest.fixture()
def namespace(cluster: Cluster) -> Iterator[str]:
    ns = f"gitops-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    yield ns
    cluster.delete_namespace(ns)
