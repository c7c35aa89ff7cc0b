"""`kubectl inference-rollout` against the sandbox with the operator running: every verb steers
through status.requests, the spec is never touched, and errors say what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from irsandbox.cluster import Cluster
from irsandbox.common import REPO
from irsandbox.story import Given, Story, Then, When

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inference_rollout.cli.plugin", *args],
        env={**os.environ, **env, "PYTHONPATH": str(REPO / "operator")},
        capture_output=True, text=True, timeout=timeout, check=False)


def test_steering_verbs_never_touch_the_spec(given: Given, when: When, then: Then,
                                             story: Story) -> None:
    env, cluster, namespace = story.env, story.cluster, story.ns
    given.rollout("cli", metrics=[], steps=[{"weight": 10, "pause": "1h"},
                                            {"weight": 50, "pause": "1h"}, {"weight": 100}])
    when.template_changes(version="v2")
    then.weight_reaches(10)
    generation = cluster.rollout(namespace, "cli")["metadata"]["generation"]

    out = cli(env, "get", "cli", "-n", namespace)
    assert out.returncode == 0, out.stderr
    assert "Phase:     Progressing" in out.stdout and "▶10%" in out.stdout
    as_json = json.loads(cli(env, "get", "cli", "-n", namespace, "-o", "json").stdout)
    assert as_json["status"]["canaryWeight"] == 10

    # pause holds the release; resume continues it
    assert cli(env, "pause", "cli", "-n", namespace).returncode == 0
    then.status(lambda s: s.get("phase") == "Paused", 30, "Paused")
    assert cli(env, "resume", "cli", "-n", namespace).returncode == 0
    then.status(lambda s: s.get("phase") == "Progressing", 30, "Progressing again")
    # promote skips the rest of the 1h hold
    assert cli(env, "promote", "cli", "-n", namespace).returncode == 0
    then.status(lambda s: s.get("canaryWeight") == 50, 60, "promoted to 50%")
    # abort rolls back; watch reports Degraded with exit code 1
    assert cli(env, "abort", "cli", "-n", namespace).returncode == 0
    watched = cli(env, "watch", "cli", "-n", namespace, "--timeout", "60s", timeout=90)
    assert watched.returncode == 1, watched.stdout[-2000:]
    st = story.release.status()
    assert st["abortReason"] == "AbortRequested" and st["canaryWeight"] == 0
    # retry starts over; promote --full finishes; watch exits 0 on Healthy
    assert cli(env, "retry", "cli", "-n", namespace).returncode == 0
    then.weight_reaches(10, 60)
    assert cli(env, "promote", "cli", "-n", namespace, "--full").returncode == 0
    watched = cli(env, "watch", "cli", "-n", namespace, "--timeout", "90s", timeout=120)
    assert watched.returncode == 0, watched.stdout[-2000:]
    assert cluster.rollout(namespace, "cli")["metadata"]["generation"] == generation
    assert cluster.status(namespace, "cli")["requests"] == {
        "abort": False, "pause": False, "promote": False, "promoteFull": False,
        "resume": False, "retry": False}


def test_errors_say_what_to_do(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    missing = cli(cluster.env, "get", "nope", "-n", namespace)
    assert missing.returncode == 1
    assert f"inferencerollout {namespace}/nope not found" in missing.stderr
    bogus = tmp_path / "kubeconfig"
    bogus.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {}}]\n")
    no_cluster = cli({**cluster.env, "KUBECONFIG": str(bogus)}, "get", "x", "-n", "default")
    assert no_cluster.returncode == 1 and "no cluster" in no_cluster.stderr
