"""A rollout's world on the bare control plane (no controller manager, no pods): the test plays
the kubelet by writing each revision Deployment's status as Ready, and drives the real
reconciler (or the real operator process) against the real API server."""

from __future__ import annotations

import asyncio
from typing import Any

from inference_rollout.core.types import RecordEvent
from inference_rollout.kube import Kube, load_configuration
from inference_rollout.paths import ns_path, rollout_path
from inference_rollout.reconciler import Deps, reconcile
from irsandbox.control_plane import ControlPlane
from irsandbox.manifests import container, inference_rollout

#: Short holds so a step is done within a second; no analysis (a step advances on its hold).
STEPS = [{"weight": 20, "pause": "1s"}, {"weight": 50, "pause": "1s"}, {"weight": 100}]


OWNED_ROUTE = {"gatewayAPI": {"parentRefs": [{"name": "gw"}]}}


def rollout(name: str, image: str = "v1",
            traffic: dict[str, Any] | None = None) -> dict[str, Any]:
    return inference_rollout(
        name, replicas=2, containers=[container(image=f"vllm/vllm-openai:{image}")],
        traffic=traffic or OWNED_ROUTE,
        strategy={"steps": STEPS, "abortScaleDownDelay": "1h", "scaleDownDelay": "1h"})


async def kube_for(cp: ControlPlane, user: str = "admin") -> Kube:
    return Kube(await load_configuration(str(cp.kubeconfig(user))))


async def no_events(_body: dict[str, Any], _event: RecordEvent) -> None:
    return None


async def deps_for(cp: ControlPlane, user: str = "admin") -> Deps:
    return Deps(kube=await kube_for(cp, user), post_event=no_events)


async def create_namespace(kube: Kube, ns: str) -> None:
    """Create ``ns`` unless it exists (a test may have put objects there first)."""
    if await kube.get_or_none(f"/api/v1/namespaces/{ns}") is None:
        await kube.create("/api/v1/namespaces", {"metadata": {"name": ns}})


async def mark_ready(kube: Kube, ns: str) -> None:
    """Every revision Deployment of ``ns`` reports all its pods Ready (the kubelet's part)."""
    deployments = await kube.get(ns_path("apps", "v1", ns, "deployments"))
    for d in deployments["items"]:
        n = int(d["spec"].get("replicas", 0))
        await kube.merge_patch(
            ns_path("apps", "v1", ns, "deployments", d["metadata"]["name"]).sub("status"),
            {"status": {"replicas": n, "readyReplicas": n, "availableReplicas": n,
                        "updatedReplicas": n, "observedGeneration": d["metadata"]["generation"]}})


async def read(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return await kube.get(rollout_path(ns, name))


async def route_weights(kube: Kube, ns: str, name: str) -> dict[str, int]:
    route = await kube.get(ns_path("gateway.networking.k8s.io", "v1", ns, "httproutes", name))
    prefix = f"{name}-"
    return {ref["name"][len(prefix):]: int(ref.get("weight", 1))
            for ref in route["spec"]["rules"][0]["backendRefs"]}


async def reconcile_until(deps: Deps, ns: str, name: str, done: Any, attempts: int = 30) -> \
        dict[str, Any]:
    """Reconcile from fresh reads (Deployments marked Ready each time) until ``done(body)``."""
    for _ in range(attempts):
        await mark_ready(deps.kube, ns)
        body = await read(deps.kube, ns, name)
        if done(body):
            return body
        await reconcile(deps, body)
        await asyncio.sleep(0.3)
    raise AssertionError(f"{ns}/{name} never reached the state; status: "
                         f"{(await read(deps.kube, ns, name)).get('status')}")


async def release_at_first_step(deps: Deps, ns: str, name: str,
                                traffic: dict[str, Any] | None = None,
                                finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
    """``name`` created (with ``finalizers``, as kopf would add), v1 promoted to stable, v2
    released and holding its first step (20%); returns the rollout as the server holds it."""
    await create_namespace(deps.kube, ns)
    manifest = rollout(name, traffic=traffic)
    manifest["metadata"]["finalizers"] = list(finalizers)
    await deps.kube.create(ns_path("rollouts.inference.dev", "v1alpha1", ns, "inferencerollouts"),
                           manifest)
    await reconcile_until(deps, ns, name,
                          lambda b: (b.get("status") or {}).get("phase") == "Healthy")
    await deps.kube.merge_patch(rollout_path(ns, name),
                                {"spec": rollout(name, "v2", traffic)["spec"]})
    return await reconcile_until(
        deps, ns, name, lambda b: (b.get("status") or {}).get("canaryWeight") == 20)
