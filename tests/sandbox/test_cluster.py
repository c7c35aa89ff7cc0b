"""The sandbox cluster itself: real API server and controllers, KWOK GPU nodes, CRDs."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from irsandbox.common import versions, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(180)]

PAUSE = "registry.k8s.io/pause:3.10"  # never pulled: KWOK only pretends to run containers


def pod_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def gpu_container(gpus: int) -> client.V1Container:
    res = {"nvidia.com/gpu": str(gpus), "cpu": "1", "memory": "1Gi"}
    return client.V1Container(
        name="server",
        image=PAUSE,
        resources=client.V1ResourceRequirements(requests=res, limits=res),
    )


def create_gpu_pod(core: client.CoreV1Api, ns: str, name: str, gpus: int,
                   annotations: dict[str, str] | None = None) -> None:
    core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, annotations=annotations),
            spec=client.V1PodSpec(containers=[gpu_container(gpus)]),
        ),
    )


def test_versions_and_nodes(api_client: client.ApiClient) -> None:
    info: Any = client.VersionApi(api_client).get_code()
    assert info.git_version == versions()["KUBERNETES_VERSION"]
    # Other tests (benchmarks) may add fake nodes of their own; the sandbox's four must be there.
    wanted = [f"gpu-node-{i}" for i in range(4)]
    nodes = [
        n
        for n in client.CoreV1Api(api_client).list_node(label_selector="type=kwok").items
        if n.metadata.name in wanted
    ]
    assert sorted(n.metadata.name for n in nodes) == wanted
    for n in nodes:
        assert n.status.allocatable["nvidia.com/gpu"] == "8"
        assert n.status.capacity["nvidia.com/gpu"] == "8"
        assert n.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)


def test_crds_installed(api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    for crd in (
        "httproutes.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "gatewayclasses.gateway.networking.k8s.io",
        "inferencepools.inference.networking.k8s.io",
    ):
        obj = ext.read_custom_resource_definition(crd)
        assert any(c.type == "Established" and c.status == "True" for c in obj.status.conditions)


def test_deployment_pods_become_ready_on_kwok_nodes(
    api_client: client.ApiClient, namespace: str
) -> None:
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    labels = {"app": "smoke"}
    apps.create_namespaced_deployment(
        namespace,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="smoke"),
            spec=client.V1DeploymentSpec(
                replicas=2,
                selector=client.V1LabelSelector(match_labels=labels),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels=labels),
                    spec=client.V1PodSpec(containers=[gpu_container(1)]),
                ),
            ),
        ),
    )

    def ready_pods() -> list[client.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector="app=smoke").items
        ok = [p for p in pods if p.status.phase == "Running" and pod_ready(p)]
        return ok if len(ok) == 2 else None

    pods = wait_for(ready_pods, 60, "2 Running+Ready pods", interval=0.25)
    for p in pods:
        node = core.read_node(p.spec.node_name)
        assert node.metadata.annotations.get("kwok.x-k8s.io/node") == "fake"
        assert p.status.pod_ip
    wait_for(
        lambda: (
            (
                apps.read_namespaced_deployment_status("smoke", namespace).status.available_replicas
                or 0
            )
            == 2
        ),
        60,
        "Deployment available",
        interval=0.25,
    )


def test_pod_asking_for_more_gpus_than_any_node_stays_pending(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    create_gpu_pod(core, namespace, "too-big", 16)

    def unschedulable() -> client.V1PodCondition | None:
        pod = core.read_namespaced_pod("too-big", namespace)
        return next(
            (
                c
                for c in pod.status.conditions or []
                if c.type == "PodScheduled" and c.status == "False"
            ),
            None,
        )

    cond = wait_for(unschedulable, 30, "PodScheduled=False", interval=0.25)
    assert cond.reason == "Unschedulable"
    assert "nvidia.com/gpu" in (cond.message or "")
    time.sleep(3)
    pod = core.read_namespaced_pod("too-big", namespace)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name


def test_startup_seconds_annotation_delays_ready(
    api_client: client.ApiClient, namespace: str
) -> None:
    """KWOK's pod-ready stage (sandbox/kwok/stages.yaml) waits sim.inference.dev/startup-seconds."""
    core = client.CoreV1Api(api_client)
    create_gpu_pod(core, namespace, "slow", 1, {"sim.inference.dev/startup-seconds": "4"})
    running = wait_for(
        lambda: (
            p
            if (p := core.read_namespaced_pod("slow", namespace)).status.phase == "Running"
            else None
        ),
        30,
        "Running",
        interval=0.25,
    )
    t_running = time.monotonic()
    assert not pod_ready(running)
    wait_for(lambda: pod_ready(core.read_namespaced_pod("slow", namespace)), 30, "Ready",
             interval=0.25)
    waited = time.monotonic() - t_running
    assert 2.0 <= waited <= 10.0, waited
