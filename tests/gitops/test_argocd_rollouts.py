"""Rollouts synced by a real Argo CD (issue 32): a commit that changes the model is a release the
operator carries through its steps while Argo CD reports the Application's health from the
health check this repository ships (deploy/argocd/health.lua, run by Argo CD's own Lua engine),
and the Application stays Synced while the operator writes the rollout's status and its own
route; the actions (deploy/argocd/actions) run through `argocd app actions run`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from irsandbox.cluster import Cluster
from irsandbox.common import wait_for
from irsandbox.harness import BackgroundLoad, OperatorProcess
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

from .conftest import ArgoCD, GitRepo

pytestmark = [pytest.mark.gitops, pytest.mark.timeout(600)]


def application(name: str, repo: GitRepo, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo.url, "targetRevision": "main", "path": "rollout"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace},
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                           "syncOptions": ["ServerSideApply=true"]},
        },
    }


def health(app: dict[str, Any]) -> tuple[str, str, str]:
    st = app.get("status") or {}
    h = st.get("health") or {}
    return (st.get("sync", {}).get("status", ""), h.get("status", ""), h.get("message", ""))


class Synced:
    """The rollout's manifest in git, its Application, and what Argo CD says of it."""

    def __init__(self, argocd: ArgoCD, cluster: Cluster, op: OperatorProcess, namespace: str,
                 tmp: Path, manifest: dict[str, Any]) -> None:
        self.argocd, self.ns = argocd, namespace
        self.name = f"{namespace}-rollout"
        self.repo = argocd.repository(self.name, tmp / "work")
        self.release = Release(cluster, op, namespace, manifest)
        self.seen: list[tuple[str, str, str]] = []

    def push(self, manifest: dict[str, Any], message: str) -> str:
        self.release.manifest = self.release._hosted(manifest)
        doc = {k: v for k, v in self.release.manifest.items() if k != "status"}
        doc["metadata"] = {"name": doc["metadata"]["name"]}
        sha = self.repo.commit({"rollout/rollout.yaml": yaml.safe_dump(doc)}, message)
        if self.started:
            self.argocd.refresh(self.name)
        return sha

    started = False

    def start(self) -> None:
        self.argocd.apply_app(application(self.name, self.repo, self.ns))
        self.started = True

    def status(self) -> tuple[str, str, str]:
        now = health(self.argocd.app(self.name))
        if not self.seen or self.seen[-1] != now:
            self.seen.append(now)
        return now

    def wait_app(self, check: Any, timeout: float, what: str) -> tuple[str, str, str]:
        return wait_for(lambda: (lambda s: s if check(s) else None)(self.status()), timeout,
                        f"Application {self.name}: {what} (seen: {self.seen[-5:]})",
                        interval=0.5)


@pytest.fixture()
def synced(argocd: ArgoCD, cluster: Cluster, operator_process: OperatorProcess, namespace: str,
           tmp_path: Path) -> Any:
    manifest = sandbox_rollout("chat", prometheus=cluster.env["PROMETHEUS_URL"],
                               steps=[{"weight": 20, "pause": "20s"}, {"weight": 100}])
    s = Synced(argocd, cluster, operator_process, namespace, tmp_path, manifest)
    yield s
    argocd.delete_app(s.name)


def test_a_commit_is_released_and_argocd_reports_its_health_throughout(synced: Synced) -> None:
    # Given a rollout in git, synced by Argo CD and Healthy on v1
    synced.push(synced.release.manifest, "v1")
    synced.start()
    synced.wait_app(lambda s: s[:2] == ("Synced", "Healthy"), 180, "Synced and Healthy")
    v1 = synced.release.wait_healthy()["stableRevision"]
    load = BackgroundLoad(synced.release.cluster.env, synced.release.host)
    try:
        # When a commit changes the model server's version
        synced.push(with_template(synced.release.manifest, version="v2"), "v2")
        # Then Argo CD syncs it, the operator releases it, and the Application's health is
        # Progressing with the operator's message, then Healthy on the new revision
        st = synced.release.wait(lambda s: s.get("canaryWeight") == 20, 120, "canary at 20%")
        v2 = st["canaryRevision"]
        progressing = synced.wait_app(lambda s: s[1] == "Progressing", 60, "Progressing")
        assert "20%" in progressing[2] or "step" in progressing[2], progressing
        synced.release.wait_healthy(revision=v2, timeout=240)
        synced.wait_app(lambda s: s[:2] == ("Synced", "Healthy"), 120, "Healthy again")
    finally:
        load.stop()
    # and it stayed Synced while the operator wrote the status, the route and the revisions
    assert v1 != v2
    assert all(sync == "Synced" for sync, _h, _m in synced.seen[1:]), synced.seen
    print(f"Argo CD saw: {synced.seen}")


def actions(synced: Synced) -> dict[str, bool]:
    """Action name → enabled, as Argo CD's discovery.lua says for the live rollout."""
    out = synced.argocd.cli("app", "actions", "list", synced.name, "--kind", "InferenceRollout",
                            "--resource-name", "chat", "--namespace", synced.ns, "-o", "json")
    import json
    return {a["name"]: not a.get("disabled", False) for a in json.loads(out or "[]")}


def run_action(synced: Synced, name: str) -> None:
    synced.argocd.cli("app", "actions", "run", synced.name, name, "--kind", "InferenceRollout",
                      "--resource-name", "chat", "--namespace", synced.ns)


def test_promote_abort_and_retry_run_as_argocd_actions(synced: Synced) -> None:
    # Given a synced rollout whose first step waits for a promote
    manual = with_template(synced.release.manifest)
    manual["spec"]["strategy"]["steps"] = [{"weight": 20, "pause": "1s", "manual": True},
                                           {"weight": 100}]
    synced.push(manual, "v1, manual first step")
    synced.start()
    synced.wait_app(lambda s: s[:2] == ("Synced", "Healthy"), 180, "Synced and Healthy")
    synced.release.wait_healthy()
    assert actions(synced) == {"promote": False, "abort": False, "retry": False}
    load = BackgroundLoad(synced.release.cluster.env, synced.release.host)
    try:
        # When v2 is committed and paused at its manual step, "promote" runs in Argo CD
        synced.push(with_template(synced.release.manifest, version="v2"), "v2")
        v2 = synced.release.wait(lambda s: s.get("phase") == "Paused", 120,
                                 "paused for promote")["canaryRevision"]
        assert actions(synced) == {"promote": True, "abort": True, "retry": False}
        run_action(synced, "promote")
        # Then the release goes on and is promoted
        synced.release.wait_healthy(revision=v2, timeout=120)
        # When v3 is committed and "abort" runs: rolled back, and Argo CD says Degraded
        synced.push(with_template(synced.release.manifest, version="v3"), "v3")
        synced.release.wait(lambda s: s.get("canaryWeight") == 20, 120, "v3 at 20%")
        run_action(synced, "abort")
        synced.release.wait(lambda s: s.get("aborted") and s.get("canaryWeight") == 0, 60,
                            "rolled back")
        degraded = synced.wait_app(lambda s: s[1] == "Degraded", 60, "Degraded")
        assert "abort" in degraded[2].lower() or "rolled back" in degraded[2], degraded
        assert actions(synced) == {"promote": False, "abort": False, "retry": True}
        # and "retry" starts the same release again
        run_action(synced, "retry")
        synced.release.wait(lambda s: not s.get("aborted") and s.get("canaryWeight") == 20,
                            120, "v3 released again")
    finally:
        load.stop()
    assert all(sync == "Synced" for sync, _h, _m in synced.seen[1:]), synced.seen


def test_a_git_revert_during_the_canary_ends_it_as_an_abort_does(synced: Synced) -> None:
    # Given v2 committed and at its 20 % step
    synced.release.manifest["spec"]["strategy"]["steps"] = [{"weight": 20, "pause": "10m"},
                                                            {"weight": 100}]
    synced.push(synced.release.manifest, "v1")
    synced.start()
    v1 = synced.release.wait_healthy(timeout=180)["stableRevision"]
    synced.push(with_template(synced.release.manifest, version="v2"), "v2")
    v2 = synced.release.wait(lambda s: s.get("canaryWeight") == 20, 120,
                             "v2 at 20%")["canaryRevision"]
    # When the commit is reverted in git
    synced.repo.git("revert", "--no-edit", "HEAD")
    synced.repo.git("push", "-q", "origin", "main")
    synced.argocd.refresh(synced.name)
    # Then Argo CD syncs v1's template back and the operator ends the canary: all traffic on
    # v1, no canary, Healthy, and the Application Synced and Healthy
    st = synced.release.wait(lambda s: s.get("phase") == "Healthy" and not s.get("canaryRevision"),
                             120, "the canary ended")
    assert st["stableRevision"] == v1
    assert synced.release.route() == {v1: 100} or synced.release.route() == {v1: 100, v2: 0}
    synced.wait_app(lambda s: s[:2] == ("Synced", "Healthy"), 60, "Synced and Healthy")
