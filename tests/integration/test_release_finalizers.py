"""``inference-rollout release-finalizers`` on a real API server: the operator is gone, a rollout
whose canary carries 20 % of a user-owned route is deleted and hangs on its finalizer; the
command moves all traffic to stable, keeps the stable's Deployment and Service for the route (no
owner left to garbage-collect them), and lets the rollout go.  A live rollout is left alone."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from tests.integration.rollout_world import (
    create_namespace,
    deps_for,
    read,
    release_at_first_step,
)

from inference_rollout.__main__ import main
from inference_rollout.paths import ns_path, rollout_path
from inference_rollout.uninstall import FINALIZER
from irsandbox.control_plane import ControlPlane

pytestmark = pytest.mark.integration

USER_ROUTE = {"gatewayAPI": {"httpRouteRef": {"name": "chat-route"}}}


def test_a_rollout_left_behind_by_the_operator_is_released_traffic_first(
        control_plane: ControlPlane, capsys: pytest.CaptureFixture[str]) -> None:
    ns = "orphaned"
    routes = ns_path("gateway.networking.k8s.io", "v1", ns, "httproutes")

    async def setup() -> tuple[str, str]:
        deps = await deps_for(control_plane)
        await create_namespace(deps.kube, ns)
        await deps.kube.create(routes, {
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "chat-route"},
            "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": []}]}})
        held = await release_at_first_step(deps, ns, "chat", USER_ROUTE, (FINALIZER,))
        live = await release_at_first_step(deps, f"{ns}-live", "chat", None, (FINALIZER,))
        assert live["status"]["canaryWeight"] == 20
        await deps.kube.delete(rollout_path(ns, "chat"))  # no operator: it stays, Terminating
        assert (await read(deps.kube, ns, "chat"))["metadata"]["deletionTimestamp"]
        return held["status"]["stableRevision"], held["status"]["canaryRevision"]

    stable, canary = asyncio.run(setup())
    started = time.monotonic()
    assert main(["release-finalizers", "-n", ns, "-n", f"{ns}-live",
                 "--kubeconfig", str(control_plane.kubeconfig())]) == 0
    # the canary left the route first, and had the gateway's moment to drain (not the hour
    # its abortScaleDownDelay would give it under the operator)
    said = capsys.readouterr().out
    drain = re.search(rf"revisions {canary} drain for (\d+)s more", said)
    assert drain and 1 <= int(drain[1]) <= 30, said  # capped 30 s after the deletion
    assert "waiting 10s for the gateway" in said
    assert 10 <= time.monotonic() - started < 60

    async def after() -> None:
        deps = await deps_for(control_plane)
        assert await deps.kube.get_or_none(rollout_path(ns, "chat")) is None, "still there"
        route = await deps.kube.get(
            ns_path("gateway.networking.k8s.io", "v1", ns, "httproutes", "chat-route"))
        weights = {r["name"]: r.get("weight", 1) for r in route["spec"]["rules"][0]["backendRefs"]}
        assert weights.get(f"chat-{stable}") == 100 and weights.get(f"chat-{canary}", 0) == 0
        for kind in (ns_path("apps", "v1", ns, "deployments", f"chat-{stable}"),
                     ns_path("", "v1", ns, "services", f"chat-{stable}")):
            assert not (await deps.kube.get(kind))["metadata"].get("ownerReferences"), kind
        live = await read(deps.kube, f"{ns}-live", "chat")
        assert FINALIZER in live["metadata"]["finalizers"] and live["status"]["canaryWeight"] == 20

    asyncio.run(after())
