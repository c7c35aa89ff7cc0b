"""Rollouts synced by a real Argo CD (issue 32): a commit that changes the model is a release the
operator carries through its steps while Argo CD reports the Application's health from the
health check this repository ships (deploy/argocd/health.lua, run by Argo CD's own Lua engine),
and the Application stays Synced while the operator writes the rollout's status and its own
route; the actions (deploy/argocd/actions) run through `argocd app actions run`.
"""

from __future__ import annotations

import json
import time
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
            "destination": {"name": "sandbox", "namespace": namespace},
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
        self.compared: list[tuple[str, str]] = []
        self.started = False  # a push before start() leaves Argo CD's first sync to start()

    def push(self, manifest: dict[str, Any], message: str) -> str:
        self.release.manifest = self.release._hosted(manifest)
        doc = {k: v for k, v in self.release.manifest.items() if k != "status"}
        doc["metadata"] = {"name": doc["metadata"]["name"]}
        sha = self.repo.commit({"rollout/rollout.yaml": yaml.safe_dump(doc)}, message)
        if self.started:
            self.argocd.refresh(self.name)
        return sha

    def start(self) -> None:
        self.argocd.apply_app(application(self.name, self.repo, self.ns))
        self.started = True

    def status(self) -> tuple[str, str, str]:
        app = self.argocd.app(self.name)
        now = health(app)
        if not self.seen or self.seen[-1] != now:
            self.seen.append(now)
        sync = ((app.get("status") or {}).get("sync") or {})
        self.compared.append((sync.get("status", ""), sync.get("revision", "")))
        return now

    def drifted(self) -> list[tuple[str, str]]:
        """OutOfSync moments of a revision Argo CD had already synced: drift from what the
        operator writes (a new commit is OutOfSync until its sync, which is no drift)."""
        synced: set[str] = set()
        out = []
        for status, revision in self.compared:
            if status == "Synced":
                synced.add(revision)
            elif status == "OutOfSync" and revision in synced:
                out.append((status, revision))
        return out

    def healthy_on_v1(self) -> str:
        """Given: the rollout's manifest in git as v1, its Application synced and Healthy, the
        rollout Healthy; its stable revision."""
        self.push(self.release.manifest, "v1")
        self.start()
        self.wait_app(lambda s: s[:2] == ("Synced", "Healthy"), 180, "Synced and Healthy")
        return str(self.release.wait_healthy()["stableRevision"])

    def rollout_health(self) -> dict[str, str]:
        return self.argocd.resource_health(self.name, "InferenceRollout", "chat")

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
    v1 = synced.healthy_on_v1()
    load = BackgroundLoad(synced.release.cluster.env, synced.release.host)
    try:
        # When a commit changes the model server's version
        synced.push(with_template(synced.release.manifest, version="v2"), "v2")
        # Then Argo CD syncs it, the operator releases it, and the Application's health is
        # Progressing with the operator's message, then Healthy on the new revision
        st = synced.release.wait(lambda s: s.get("canaryWeight") == 20, 120, "canary at 20%")
        v2 = st["canaryRevision"]
        progressing = synced.wait_app(lambda s: s[1] == "Progressing", 60, "Progressing")
        # Argo CD 3 words the Application's health by the resource that causes it; the
        # operator's message is that resource's health, from deploy/argocd/health.lua
        cause = f"Caused by rollouts.inference.dev/InferenceRollout:{synced.ns}/chat"
        assert progressing[2] == cause, progressing
        rollout_health = synced.rollout_health()
        assert rollout_health.get("status") == "Progressing", rollout_health
        assert "20%" in rollout_health.get("message", ""), rollout_health
        synced.release.wait_healthy(revision=v2, timeout=240)
        synced.wait_app(lambda s: s[:2] == ("Synced", "Healthy"), 120, "Healthy again")
    finally:
        load.stop()
    # and it stayed Synced while the operator wrote the status, the route and the revisions
    assert v1 != v2
    assert not synced.drifted(), (synced.drifted(), synced.seen)
    print(f"Argo CD saw: {synced.seen}")


def test_a_bad_release_is_rolled_back_and_argocd_says_degraded_with_the_reason(
        synced: Synced) -> None:
    # Given a rollout in git, synced and Healthy on v1
    v1 = synced.healthy_on_v1()
    load = BackgroundLoad(synced.release.cluster.env, synced.release.host)
    try:
        # When a commit ships a model server that fails 30 % of its requests
        synced.push(with_template(synced.release.manifest, version="v2", failure_rate=30),
                    "v2, broken")
        # Then the operator rolls it back on its own, and Argo CD reports the Application
        # Degraded, the rollout's health naming the failed check
        st = synced.release.wait(lambda s: s.get("aborted"), 180, "rolled back")
        synced.wait_app(lambda s: s[1] == "Degraded", 60, "Degraded")
    finally:
        load.stop()
    assert st["stableRevision"] == v1
    assert synced.release.route().get(v1) == 100, synced.release.route()
    degraded = synced.rollout_health()
    assert degraded.get("status") == "Degraded", degraded
    assert degraded.get("message", "").startswith("rolled back: errors"), degraded
    # and the Application stays Synced: git still asks for v2, the cluster has v2's template,
    # and the rollback lives in the status and the route the operator owns
    assert synced.status()[0] == "Synced", synced.seen
    assert not synced.drifted(), (synced.drifted(), synced.seen)


def actions(synced: Synced) -> dict[str, bool]:
    """Action name → enabled, as Argo CD's discovery.lua says for the live rollout."""
    out = synced.argocd.cli("app", "actions", "list", synced.name, "--kind", "InferenceRollout",
                            "--resource-name", "chat", "--namespace", synced.ns, "-o", "json")
    return {a["Action"]: not a["Disabled"] for a in json.loads(out or "[]")}


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
        synced.wait_app(lambda s: s[1] == "Degraded", 60, "Degraded")
        degraded = synced.rollout_health()
        assert degraded.get("status") == "Degraded", degraded
        assert "rolled back" in degraded.get("message", ""), degraded
        assert actions(synced) == {"promote": False, "abort": False, "retry": True}
        # and "retry" starts the same release again
        run_action(synced, "retry")
        synced.release.wait(lambda s: not s.get("aborted") and s.get("canaryWeight") == 20,
                            120, "v3 released again")
    finally:
        load.stop()
    assert not synced.drifted(), (synced.drifted(), synced.seen)


def test_a_git_revert_during_the_canary_ends_it_as_an_abort_does(synced: Synced) -> None:
    # Given v2 committed and at its 20 % step
    synced.release.manifest["spec"]["strategy"]["steps"] = [{"weight": 20, "pause": "10m"},
                                                            {"weight": 100}]
    v1 = synced.healthy_on_v1()
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


def watch_until_promoted(rel: Release, old: str, watch: Any, timeout: float) -> None:
    """Call ``watch`` every half second until the release has promoted past ``old`` (or
    ``timeout``): what the route and Argo CD said *throughout* the release."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        watch()
        st = rel.status()
        if st.get("phase") == "Healthy" and not st.get("canaryRevision") and st.get(
                "stableRevision") != old:
            return
        time.sleep(0.5)


ROUTE_IGNORE = {"ignoreDifferences": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                       "name": "chat",
                                       "jqPathExpressions": [".spec.rules[].backendRefs"]}]}


@pytest.mark.parametrize("ignored", [False, True], ids=["without-ignoreDifferences",
                                                        "with-ignoreDifferences"])
def test_a_users_route_in_git_needs_the_documented_ignore_differences(
        synced: Synced, ignored: bool) -> None:
    """docs/gitops.md 3b, proven both ways: without the ignoreDifferences, self-heal puts git's
    backendRefs back over the operator's weights (the Application OutOfSync at a revision it
    had synced); with it (and RespectIgnoreDifferences), the release runs to promotion with
    the Application Synced and the route never reverted."""
    from irsandbox.manifests import httproute

    rel = synced.release
    rel.manifest["spec"]["traffic"] = {"gatewayAPI": {"httpRouteRef": {"name": "chat"}}}
    rel.manifest["spec"]["strategy"]["steps"] = [{"weight": 20, "pause": "20s"}, {"weight": 100}]
    git_route = httproute("chat", [("chat-from-git", 100)], [rel.host])
    synced.repo.commit({"rollout/route.yaml": yaml.safe_dump(git_route)}, "the user's route")
    synced.push(rel.manifest, "v1")
    app = application(synced.name, synced.repo, synced.ns)
    if ignored:
        app["spec"].update(ROUTE_IGNORE)
        app["spec"]["syncPolicy"]["syncOptions"].append("RespectIgnoreDifferences=true")
    synced.argocd.apply_app(app)
    synced.started = True
    synced.wait_app(lambda s: s[0] == "Synced", 180, "Synced")
    v1 = rel.wait(lambda s: s.get("phase") == "Healthy", 120, "Healthy")["stableRevision"]
    # the route as git has it, or as the operator wrote it, each time it is read
    reverted: list[dict[str, int]] = []

    def watch() -> None:
        synced.status()
        weights = rel.cluster.route_weights(rel.ns, "chat")
        if "chat-from-git" in weights:
            reverted.append(weights)

    load = BackgroundLoad(rel.cluster.env, rel.host)
    try:
        synced.push(with_template(rel.manifest, version="v2"), "v2")
        watch_until_promoted(rel, v1, watch, 120)
        for _ in range(10):  # a few more reads after the release: self-heal takes seconds
            watch()
            time.sleep(0.5)
    finally:
        load.stop()
    if ignored:
        assert not reverted, reverted[:3]
        assert not synced.drifted(), (synced.drifted(), synced.seen)
        assert rel.status().get("stableRevision") != v1, rel.status()
    else:
        assert reverted or synced.drifted(), (
            "self-heal without ignoreDifferences was expected to fight the operator's weights",
            synced.seen)
    print(f"ignored={ignored}: git's backendRefs back {len(reverted)} times; "
          f"drift {synced.drifted()[:2]}; Argo CD saw {synced.seen}")


HEADER_ROUTES_IGNORE = {"ignoreDifferences": [{
    "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "chat",
    "jqPathExpressions": [
        ".spec.rules[].backendRefs",
        '.spec.rules[] | select((.name // "") | startswith("inference-rollout-"))']}]}


@pytest.mark.parametrize("rules_ignored", [False, True], ids=["weights-only", "documented-jq"])
def test_header_routes_on_a_users_route_survive_self_heal_with_the_documented_jq(
        synced: Synced, rules_ignored: bool) -> None:
    """docs/traffic.md "GitOps": with testers and session affinity, the operator adds rules
    git does not have (inference-rollout-*). The documented second jq expression keeps them
    out of the diff and RespectIgnoreDifferences keeps self-heal from deleting them: the
    release runs through its testers' step and a weighted one with the Application Synced.
    Without it (the backendRefs expression alone), self-heal deletes them."""
    from irsandbox.manifests import httproute

    rel = synced.release
    rel.manifest["spec"]["traffic"] = {
        "gatewayAPI": {"httpRouteRef": {"name": "chat"}},
        "testers": {"headers": [{"name": "X-Canary", "value": "always"}]},
        "sessionAffinity": {"cookie": {"maxAge": "5m"}}}
    rel.manifest["spec"]["strategy"]["steps"] = [
        {"weight": 0, "pause": "15s"}, {"weight": 20, "pause": "15s"}, {"weight": 100}]
    git_route = httproute("chat", [("chat-from-git", 100)], [rel.host])
    synced.repo.commit({"rollout/route.yaml": yaml.safe_dump(git_route)}, "the user's route")
    synced.push(rel.manifest, "v1")
    app = application(synced.name, synced.repo, synced.ns)
    app["spec"].update(HEADER_ROUTES_IGNORE if rules_ignored else ROUTE_IGNORE)
    app["spec"]["syncPolicy"]["syncOptions"].append("RespectIgnoreDifferences=true")
    synced.argocd.apply_app(app)
    synced.started = True
    synced.wait_app(lambda s: s[0] == "Synced", 180, "Synced")
    v1 = rel.wait(lambda s: s.get("phase") == "Healthy", 120, "Healthy")["stableRevision"]
    kinds_seen: set[str] = set()  # which header routes the live route held, over the release
    lost: list[tuple[str, ...]] = []  # reads where a rule the step needs was gone

    def watch() -> None:
        synced.status()
        st = rel.status()
        names = tuple(r.get("name", "") for r in rel.cluster.route(rel.ns, "chat")["spec"]["rules"])
        held = {k for k in ("testers", "sessions") if any(f"-{k}-" in n for n in names)}
        kinds_seen.update(held)
        if "testers" in kinds_seen and st.get("canaryRevision") and st.get(
                "stepStartedAt") and "testers" not in held:
            lost.append(names)

    load = BackgroundLoad(rel.cluster.env, rel.host)
    testers = BackgroundLoad(rel.cluster.env, rel.host, rate=5, headers={"X-Canary": "always"})
    try:
        synced.push(with_template(rel.manifest, version="v2"), "v2")
        watch_until_promoted(rel, v1, watch, 180)
    finally:
        load.stop()
        testers.stop()
    print(f"rules ignored={rules_ignored}: header routes seen {sorted(kinds_seen)}; testers' "
          f"rule missing in {len(lost)} reads; drift {synced.drifted()[:2]}; "
          f"Argo CD saw {synced.seen}")
    assert "testers" in kinds_seen, kinds_seen
    if rules_ignored:
        assert rel.status().get("stableRevision") != v1, rel.status()
        assert kinds_seen == {"testers", "sessions"}, kinds_seen
        assert not lost, lost[:3]
        assert not synced.drifted(), (synced.drifted(), synced.seen)
    else:
        assert lost or synced.drifted(), (
            "self-heal without the rules' expression was expected to delete them", synced.seen)

