"""`kubectl inference-rollout` against the sandbox with the operator running: every verb steers
through status.requests, the spec is never touched, and errors say what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from irsandbox.cluster import Cluster
from irsandbox.harness import plugin
from irsandbox.story import Given, Story, Then, When

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_steering_verbs_never_touch_the_spec(given: Given, when: When, then: Then,
                                             story: Story) -> None:
    env, cluster, namespace = story.env, story.cluster, story.ns
    given.rollout("cli", metrics=[], steps=[{"weight": 10, "pause": "1h"},
                                            {"weight": 50, "pause": "1h"}, {"weight": 100}])
    when.template_changes(version="v2")
    then.weight_reaches(10)
    generation = cluster.rollout(namespace, "cli")["metadata"]["generation"]

    out = plugin(env, "get", "cli", "-n", namespace)
    assert out.returncode == 0, out.stderr
    assert "Phase:     Progressing" in out.stdout and "▶10%" in out.stdout
    as_json = json.loads(plugin(env, "get", "cli", "-n", namespace, "-o", "json").stdout)
    assert as_json["status"]["canaryWeight"] == 10

    # pause holds the release; resume continues it
    assert plugin(env, "pause", "cli", "-n", namespace).returncode == 0
    then.status(lambda s: s.get("phase") == "Paused", 30, "Paused")
    assert plugin(env, "resume", "cli", "-n", namespace).returncode == 0
    then.status(lambda s: s.get("phase") == "Progressing", 30, "Progressing again")
    # promote skips the rest of the 1h hold
    assert plugin(env, "promote", "cli", "-n", namespace).returncode == 0
    then.status(lambda s: s.get("canaryWeight") == 50, 60, "promoted to 50%")
    # abort rolls back; watch reports Degraded with exit code 1
    assert plugin(env, "abort", "cli", "-n", namespace).returncode == 0
    watched = plugin(env, "watch", "cli", "-n", namespace, "--timeout", "60s", timeout=90)
    assert watched.returncode == 1, watched.stdout[-2000:]
    st = story.release.status()
    assert st["abortReason"] == "AbortRequested" and st["canaryWeight"] == 0
    # retry starts over; promote --full finishes; watch exits 0 on Healthy
    assert plugin(env, "retry", "cli", "-n", namespace).returncode == 0
    then.weight_reaches(10, 60)
    assert plugin(env, "promote", "cli", "-n", namespace, "--full").returncode == 0
    watched = plugin(env, "watch", "cli", "-n", namespace, "--timeout", "90s", timeout=120)
    assert watched.returncode == 0, watched.stdout[-2000:]
    assert cluster.rollout(namespace, "cli")["metadata"]["generation"] == generation
    assert cluster.status(namespace, "cli")["requests"] == {
        "abort": False, "pause": False, "promote": False, "promoteFull": False,
        "resume": False, "retry": False}


def test_errors_say_what_to_do(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    missing = plugin(cluster.env, "get", "nope", "-n", namespace)
    assert missing.returncode == 1
    assert f"inferencerollout {namespace}/nope not found" in missing.stderr
    bogus = tmp_path / "kubeconfig"
    bogus.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {}}]\n")
    no_cluster = plugin({**cluster.env, "KUBECONFIG": str(bogus)}, "get", "x", "-n", "default")
    assert no_cluster.returncode == 1 and "no cluster" in no_cluster.stderr
