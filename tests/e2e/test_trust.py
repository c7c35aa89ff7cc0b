"""Trust end to end (issue 9): inputs the API server accepts never leave traffic on a canary the
operator cannot watch, and a deletion never waits for a route that is gone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from irsandbox.cluster import Cluster
from irsandbox.common import wait_for
from irsandbox.harness import BackgroundLoad, OperatorProcess
from irsandbox.manifests import GATEWAY_PARENT, sandbox_rollout, with_template
from irsandbox.story import Release

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _user_route(cluster: Cluster, namespace: str, name: str) -> None:
    cluster.custom.create_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "httproutes",
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
         "metadata": {"name": name},
         "spec": {"parentRefs": [dict(GATEWAY_PARENT)], "hostnames": [f"{name}.{namespace}.test"],
                  "rules": [{"backendRefs": []}]}})


def _gone(cluster: Cluster, ns: str, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        cluster.rollout(ns, name)
        return False
    except ApiException as e:
        return e.status == 404


def _released_at_20(cluster: Cluster, op: OperatorProcess, namespace: str,
                    manifest: dict[str, Any]) -> tuple[Release, str, str]:
    rel = Release(cluster, op, namespace, manifest)
    rel.apply()
    v1 = rel.wait_healthy()["stableRevision"]
    rel.apply(with_template(rel.manifest, version="v2"))
    rel.wait(lambda s: s.get("canaryWeight") == 20, 60, "canary at 20%")
    return rel, v1, rel.status()["canaryRevision"]


def test_deleting_a_rollout_whose_route_was_pruned_first_is_not_blocked(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a release at 20% on a user-owned route
    _user_route(cluster, namespace, "pruned")
    manifest = sandbox_rollout("pruned", prometheus=cluster.env["PROMETHEUS_URL"], metrics=[],
                       steps=[{"weight": 20, "pause": "10m"}, {"weight": 100}])
    manifest["spec"]["traffic"] = {"gatewayAPI": {"httpRouteRef": {"name": "pruned"}}}
    _released_at_20(cluster, operator_process, namespace, manifest)
    # When a GitOps prune deletes the route first, then the rollout
    cluster.custom.delete_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", namespace, "httproutes", "pruned")
    cluster.delete_rollout(namespace, "pruned")
    # Then the finalizer does not wait for the route: the rollout is gone within seconds
    wait_for(lambda: _gone(cluster, namespace, "pruned"), 20, "rollout gone")


def test_a_spec_that_stops_parsing_mid_release_takes_the_canary_off_the_route(
        cluster: Cluster, operator_process: OperatorProcess, namespace: str) -> None:
    # Given a release at 20%
    manifest = sandbox_rollout("unparsed", prometheus=cluster.env["PROMETHEUS_URL"],
                       steps=[{"weight": 20, "pause": "10s"}, {"weight": 100}],
                       analysis={"verdicts": "Window"})
    rel = Release(cluster, operator_process, namespace, manifest)
    load = BackgroundLoad(cluster.env, rel.host)
    try:
        _resumes_after_the_spec_is_fixed(cluster, operator_process, namespace, rel)
    finally:
        load.stop()


def _resumes_after_the_spec_is_fixed(cluster: Cluster, op: OperatorProcess, namespace: str,
                                     rel: Release) -> None:
    rel, v1, v2 = _released_at_20(cluster, op, namespace, rel.manifest)
    good = copy.deepcopy(rel.manifest)
    # When the template gets two unnamed ports (the API server accepts it; the operator cannot
    # tell which one serves, so the spec does not parse)
    bad = copy.deepcopy(good)
    bad["spec"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 8000}, {"containerPort": 9000}]
    rel.apply(bad)
    # Then the canary loses its traffic at once, and Valid=False says why
    st = rel.wait(lambda s: s.get("canaryWeight") == 0, 30, "canary weight 0")
    wait_for(lambda: rel.route() == {v1: 100, v2: 0}, 15, "route back to stable")
    valid = next(c for c in st["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and "port" in valid["message"], valid
    # And when the manifest is fixed, the release resumes and is promoted
    rel.apply(good)
    rel.wait_healthy(revision=v2, timeout=120)
