"""The lints gate a release end to end: a template with a lint error gets ``Valid=False`` naming
the finding, is never given traffic nor a canary, and the release goes on once it is fixed.

Written for issue 14 (item 3); the unit tiers test the lints and the decision core, this is the
operator's whole path (reconcile → lint_manifest → Valid condition → route) on a real API server.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from irsandbox.cluster import Cluster
from irsandbox.harness import OperatorProcess
from irsandbox.manifests import sandbox_rollout, with_template
from irsandbox.story import Release

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def stays_on(rel: Release, stable: str, seconds: float) -> None:
    """For ``seconds``, looking every second: no canary is started, ``stable`` stays the stable
    revision and has all the route's traffic."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        st = rel.status()
        assert not st.get("canaryRevision") and st.get("stableRevision") == stable, st
        assert {rev: w for rev, w in rel.route().items() if w} == {stable: 100}, rel.route()
        time.sleep(1)


def test_a_release_with_a_lint_error_gets_valid_false_and_no_traffic(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a rollout Healthy on v1
    good = sandbox_rollout("lint", prometheus=cluster.env["PROMETHEUS_URL"])
    rel = Release(cluster, operator_process, namespace, good)
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]

    # When v2's vLLM command line has an error vLLM would refuse (fp16 is not a KV-cache dtype)
    bad = with_template(rel.manifest, version="v2")
    bad["spec"]["template"]["spec"]["containers"][0]["args"] += ["--kv-cache-dtype", "fp16"]
    rel.apply(bad)

    # Then Valid is False, naming the finding and the flag
    st = rel.wait(lambda s: condition(s, "Valid").get("status") == "False", 60, "Valid=False")
    valid = condition(st, "Valid")
    assert valid["reason"] == "InvalidSpec", valid
    assert "ARGS-INVALID" in valid["message"] and "--kv-cache-dtype" in valid["message"], valid
    # and for 15 s no canary is started and only v1 has traffic
    stays_on(rel, v1, seconds=15)

    # When the error is fixed, the release starts: Valid again, a canary revision
    fixed = with_template(copy.deepcopy(good), version="v3")
    rel.apply(fixed)
    st = rel.wait(lambda s: condition(s, "Valid").get("status") == "True"
                  and bool(s.get("canaryRevision")), 60, "Valid=True and a canary")
    assert st["stableRevision"] == v1


def test_adapters_on_pods_without_lora_are_refused_whole(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    """An adapter needs vLLM's runtime LoRA (``--enable-lora``, runtime updating on): a spec
    naming one on a template without it is refused on the Valid condition, naming the flag,
    and nothing moves; taking the field out again restores the rollout.  (Without the
    operator's ``--adapter-releases`` every spec naming adapters is refused:
    ``tests/unit/test_crd.py``.)"""
    # Given a rollout Healthy on v1, its vLLM without --enable-lora
    rel = Release(cluster, operator_process, namespace,
                  sandbox_rollout("lora", prometheus=cluster.env["PROMETHEUS_URL"]))
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    deployments = cluster.deployments(namespace)

    # When an adapter is added, and nothing else
    with_adapter = copy.deepcopy(rel.manifest)
    with_adapter["spec"]["adapters"] = [{"name": "support", "source": "/adapters/support/v1"}]
    rel.apply(with_adapter)

    # Then Valid is False naming the flag to add, and nothing moves
    st = rel.wait(lambda s: condition(s, "Valid").get("status") == "False", 60, "Valid=False")
    assert "LORA-ADAPTERS-NEED-LORA" in condition(st, "Valid")["message"], st
    assert "--enable-lora" in condition(st, "Valid")["message"], st
    # and adapters cannot be added to pods started without them but with a new template
    assert "pods were started without adapters" in condition(st, "Valid")["message"], st
    stays_on(rel, v1, seconds=10)
    assert cluster.deployments(namespace) == deployments  # no pod was started or stopped

    # When the adapter is taken out again, the rollout is valid and Healthy on v1
    without = copy.deepcopy(with_adapter)
    del without["spec"]["adapters"]
    rel.apply(without)
    st = rel.wait(lambda s: condition(s, "Valid").get("status") == "True"
                  and s.get("phase") == "Healthy", 60, "Valid=True and Healthy")
    assert st["stableRevision"] == v1 and not st.get("canaryRevision")
