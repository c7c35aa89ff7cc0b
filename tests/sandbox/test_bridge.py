"""The pod bridge on the sandbox: each vLLM pod on a KWOK node is a real llm-d-inference-sim
process, scraped by the real Prometheus with the pod's identity, shaped by its annotations."""

from __future__ import annotations

import asyncio
import ipaddress
import subprocess
import time

import httpx
import pytest
from kubernetes import client

from irsandbox import manifests
from irsandbox.bridge import listen_addresses
from irsandbox.common import pid_cmdline, read_json, wait_for
from irsandbox.loadgen import run_load
from irsandbox.podspec import CONDITION_LOADED, LABEL_REVISION

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(240)]

#: vllm:time_to_first_token_seconds buckets of llm-d-inference-sim (pkg/common/utils.go)
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0]


def bucket_of(seconds: float) -> tuple[float, float]:
    lower = 0.0
    for upper in TTFT_BUCKETS:
        if seconds <= upper:
            return lower, upper
        lower = upper
    raise ValueError(seconds)


def test_simulator_metrics_reach_prometheus_with_pod_labels_and_ttft(kit, namespace):
    """Two pods, TTFT 30 ms and 300 ms: Prometheus scrapes each simulator with namespace/pod and
    the pod's labels, and histogram_quantile(0.99, …) over each pod lands in the bucket of its
    annotation."""
    ttfts = {"fast": 30, "slow": 300}
    for rev, ttft in ttfts.items():
        kit.create(
            namespace,
            manifests.vllm_deployment(
                f"chat-{rev}",
                revision=rev,
                annotations={
                    "sim.inference.dev/ttft-ms": str(ttft),
                    "sim.inference.dev/itl-ms": "2",
                },
            ),
        )
    pods = {}
    for rev in ttfts:
        (key,) = kit.wait_serving(namespace, f"{LABEL_REVISION}={rev}", 1)
        pods[rev] = key.split("/", 1)[1]
    endpoints = kit.endpoints()
    for pod in pods.values():
        sel = f'namespace="{namespace}",pod="{pod}"'
        wait_for(
            lambda sel=sel: kit.prom_value(f"up{{{sel}}}") == 1, 30, f"Prometheus scraping {sel}"
        )

    # load each simulator directly for a few seconds so several 1 s scrapes see the counters rise
    async def load() -> None:
        await asyncio.gather(
            *(
                run_load(
                    f"http://{endpoints[f'{namespace}/{pod}']['address']}",
                    model="llama",
                    rate=15,
                    duration=6,
                    stream=True,
                )
                for pod in pods.values()
            )
        )

    asyncio.run(load())

    for rev, pod in pods.items():
        sel = f'namespace="{namespace}",pod="{pod}"'
        up = wait_for(lambda sel=sel: kit.prom(f"up{{{sel}}}"), 30, f"target {sel}")
        labels = up[0]["metric"]
        assert labels["job"] == "pods" and labels["container"] == "vllm"
        assert labels["app"] == "chat"
        assert labels["rollouts_inference_dev_revision"] == rev  # labelmap-sanitised pod label
        assert labels["rollouts_inference_dev_rollout"] == "chat"
        assert up[0]["value"][1] == "1"
        q = (
            f"histogram_quantile(0.99, sum by (le) (rate("
            f"vllm:time_to_first_token_seconds_bucket{{{sel}}}[1m])))"
        )
        p99 = wait_for(lambda q=q: kit.prom_value(q), 30, q)
        lower, upper = bucket_of(ttfts[rev] / 1000)
        assert lower < p99 <= upper, (rev, p99)
        count = kit.prom_value(f"sum(vllm:time_to_first_token_seconds_count{{{sel}}})")
        assert count is not None and count >= 60
        # the model_name label is the served name, as vLLM's
        names = kit.prom(f"vllm:request_success_total{{{sel}}}")
        assert {r["metric"]["model_name"] for r in names} == {"llama"}


def test_startup_seconds_delays_ready_and_the_simulator_agrees(kit, namespace):
    kit.create(
        namespace,
        manifests.vllm_deployment(
            "chat-slow-load",
            revision="load",
            annotations={"sim.inference.dev/startup-seconds": "6"},
        ),
    )
    sel = f"{LABEL_REVISION}=load"

    def running_pod():
        pods = kit.pods(namespace, sel)
        return pods[0] if pods and pods[0].get("status", {}).get("phase") == "Running" else None

    pod = wait_for(running_pod, 30, "pod Running")
    name = pod["metadata"]["name"]
    key = f"{namespace}/{name}"
    started = time.monotonic()
    sim = wait_for(lambda: kit.endpoints().get(key), 10, "simulator serving")
    # loading: the pod is not Ready, the simulator's /health/ready says 503, the gateway's map
    # already knows the process but EndpointSlices will not list it
    time.sleep(1.0)
    assert not kit.ready_pods(namespace, sel)
    base = f"http://127.0.0.1:{sim['sim_port']}"
    assert httpx.get(f"{base}/health/ready", timeout=2).status_code == 503
    cond = wait_for(
        lambda: {c["type"]: c for c in kit.pods(namespace, sel)[0]["status"]["conditions"]}.get(
            CONDITION_LOADED
        ),
        10,
        "loaded condition",
    )
    assert cond["status"] == "False" and cond["reason"] == "ModelLoading"

    wait_for(lambda: kit.ready_pods(namespace, sel), 20, "pod Ready", interval=0.05)
    became_ready = time.monotonic() - started
    assert became_ready >= 5.5, f"Ready after {became_ready:.1f}s, startup-seconds is 6"
    # KWOK's timer starts when it marks the pod Running, the simulator's when the bridge has
    # started it (a few hundred ms later): /health/ready follows Ready within that lag
    wait_for(
        lambda: httpx.get(f"{base}/health/ready", timeout=2).status_code == 200,
        2,
        "simulator /health/ready 200 shortly after Ready",
        interval=0.02,
    )
    lag = time.monotonic() - started - became_ready
    print(f"Ready after {became_ready:.2f}s; simulator loaded {lag:.2f}s later")
    wait_for(
        lambda: any(
            c["type"] == CONDITION_LOADED and c["status"] == "True"
            for c in kit.pods(namespace, sel)[0]["status"]["conditions"]
        ),
        10,
        "sim.inference.dev/loaded=True",
    )


def test_annotation_change_reaches_the_running_simulator(kit, namespace):
    kit.create(namespace, manifests.vllm_deployment("chat-live", revision="live"))
    (key,) = kit.wait_serving(namespace, f"{LABEL_REVISION}=live", 1)
    name = key.split("/", 1)[1]
    url = f"http://{kit.endpoints()[key]['address']}"
    core = client.CoreV1Api(kit.api)
    core.patch_namespaced_pod(
        name,
        namespace,
        {
            "metadata": {
                "annotations": {
                    "sim.inference.dev/failure-rate": "100",
                    "sim.inference.dev/ttft-ms": "150",
                }
            }
        },
    )

    def config_applied():
        cfg = httpx.get(f"{url}/admin/config", timeout=2).json()
        return cfg.get("failure-injection-rate") == 100 and cfg

    wait_for(config_applied, 10, "failure-injection-rate=100 in /admin/config")
    report = asyncio.run(run_load(url, model="llama", rate=0, requests=20, concurrency=4))
    assert report.errors == {"http_503": 20}

    core.patch_namespaced_pod(
        name, namespace, {"metadata": {"annotations": {"sim.inference.dev/failure-rate": "0"}}}
    )
    wait_for(
        lambda: (
            httpx.get(f"{url}/admin/config", timeout=2).json().get("failure-injection-rate") == 0
        ),
        10,
        "failure-injection-rate=0",
    )
    report = asyncio.run(
        run_load(url, model="llama", rate=0, requests=10, stream=True, concurrency=2)
    )
    assert report.failed == 0
    assert 140 <= report.ttft_ms["p50"] <= 400


def test_deleting_the_pod_stops_its_simulator_and_target(kit, namespace):
    kit.create(namespace, manifests.vllm_deployment("chat-gone", revision="gone"))
    (key,) = kit.wait_serving(namespace, f"{LABEL_REVISION}=gone", 1)
    name = key.split("/", 1)[1]
    sim = kit.endpoints()[key]
    state = read_json(kit.state / "bridge" / "state.json", {})
    pid = next(b["sim_pid"] for b in state["backends"].values() if b["name"] == name)
    assert "llm-d-inference-sim" in pid_cmdline(pid)
    # Prometheus discovered the pod from the API server and scrapes it on its own address
    target = f'up{{job="pods",namespace="{namespace}",pod="{name}"}}'
    wait_for(lambda: kit.prom_value(target) == 1, 30, f"{target} == 1")
    assert kit.prom(target)[0]["metric"]["instance"] == sim["pod_address"]

    client.AppsV1Api(kit.api).patch_namespaced_deployment_scale(
        "chat-gone", namespace, {"spec": {"replicas": 0}}
    )
    wait_for(lambda: key not in kit.endpoints(), 30, "pod out of the endpoint map")
    wait_for(lambda: not pid_cmdline(pid), 15, f"simulator pid {pid} to exit")
    # and forgot it: a deleted pod is no target (the series goes stale)
    wait_for(lambda: kit.prom(target) == [], 30, f"{target} gone")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{sim['sim_port']}/health", timeout=1)


def test_simulators_listen_on_loopback_only(kit, namespace):
    """The sandbox builds llm-d-inference-sim with its listener patched to 127.0.0.1 (upstream
    listens on every interface); the shim in front of it is loopback-only as well."""
    kit.create(namespace, manifests.vllm_deployment("chat-lo", revision="lo"))
    (key,) = kit.wait_serving(namespace, f"{LABEL_REVISION}=lo", 1)
    ep = kit.endpoints()[key]
    assert listen_addresses(ep["sim_port"]) == {"127.0.0.1"}, ep
    shim = int(ep["address"].rsplit(":", 1)[1])
    assert listen_addresses(shim) == {"127.0.0.1"}, ep
    # and on the pod's own address, inside the sandbox's pod network namespace only (up.sh's):
    # never a wildcard, and nothing of the pod range listens in the host's namespace
    network, ns = kit.env.get("IR_POD_NETWORK"), kit.env.get("IR_POD_NETNS")
    assert network and ns, "no pod network in .sandbox/env: restart the sandbox (sandbox/up.sh)"
    ip, port = ep["pod_address"].rsplit(":", 1)
    addrs = listen_addresses(int(port), ns)
    assert ip in addrs, (ep, addrs)
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(network) for a in addrs), addrs
    assert ip not in listen_addresses(int(port)), "the pod's listener is in the host namespace"


def test_pods_answer_from_the_host_through_the_pod_networks_veth(kit, namespace):
    """docs/sandbox.md#pods-with-addresses: the pod range is local in the sandbox's namespace
    only; the host reaches it through the veth, and holds no route of it on its lo."""
    ns, veth = kit.env["IR_POD_NETNS"], kit.env.get("IR_POD_VETH", "irpods0")
    netns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert ns in netns_list.split(), netns_list
    local = subprocess.run(["ip", "route", "show", "table", "local"], capture_output=True,
                           text=True, check=True).stdout
    assert "10.244." not in local, local
    route = subprocess.run(["ip", "route", "get", "10.244.0.9"], capture_output=True, text=True,
                           check=True).stdout
    assert f"dev {veth}" in route, route
    kit.create(namespace, manifests.vllm_deployment("chat-net", revision="net"))
    (key,) = kit.wait_serving(namespace, f"{LABEL_REVISION}=net", 1)
    r = httpx.get(f"http://{kit.endpoints()[key]['pod_address']}/health", timeout=5)
    assert r.status_code == 200, r.text
