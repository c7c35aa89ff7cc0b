"""The reconciler's adapter-release path (docs/adapters.md) against an in-memory API server and
fake vLLM pods: what it writes, in which order, and that an adapter release moves the running
pods and starts none.  tests/e2e/test_adapter_release.py runs the same on real parts (Traefik,
the API server, Prometheus, simulators); this tier pins the reconciler's own steps, and the
refusals, where a failure points at one function."""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from tests.unit.coresim import manifest_spec
from tests.unit.fakes import PrometheusCounts
from tests.unit.memory_kube import rollout_on_route

from inference_rollout.api import LABEL_ADAPTER_SET
from inference_rollout.api import reasons as r
from inference_rollout.api.spec import ADAPTERS_NOT_BUILT
from inference_rollout.core.types import RecordEvent
from inference_rollout.kube import KubeError
from inference_rollout.paths import ns_path, rollout_path
from inference_rollout.reconciler import ADAPTERS_ON_PLAIN_PODS, Deps, reconcile
from inference_rollout.workloads.lora import VLLMAdapters

NS, NAME = "prod", "chat"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ROLLOUT = rollout_path(NS, NAME)
ROUTE = ns_path("gateway.networking.k8s.io", "v1", NS, "httproutes", NAME)
DEPLOYMENTS = ns_path("apps", "v1", NS, "deployments")
SERVICES = ns_path("", "v1", NS, "services")
PODS = ns_path("", "v1", NS, "pods")
V1, V2 = "/adapters/support/v1", "/adapters/support/v2"


def lora_spec(source: str = V1) -> dict[str, Any]:
    spec = manifest_spec()
    vllm = spec["template"]["spec"]["containers"][0]
    vllm["args"] += ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "16"]
    vllm["env"] = [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "true"}]
    spec["adapters"] = [{"name": "support", "source": source}]
    return spec


class Servers:
    """Each pod's vLLM, by address: ``/v1/models`` lists what was loaded, load/unload change it."""

    def __init__(self) -> None:
        self.loaded: dict[str, dict[str, str]] = {}
        self.calls: list[str] = []
        #: Requests each pod's vLLM has running (its /metrics); 0 unless a test says so.
        self.running: dict[str, int] = {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        ip = request.url.host
        self.calls.append(f"{request.method} {ip}{request.url.path}")
        have = self.loaded.setdefault(ip, {})
        if request.url.path == "/metrics":
            return httpx.Response(200, text=(
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="m1"}} {self.running.get(ip, 0)}\n'
                'vllm:num_requests_waiting{model_name="m1"} 0\n'))
        if request.url.path == "/v1/models":
            data = [{"id": "m1", "root": "m1", "parent": None}] + [
                {"id": n, "root": src, "parent": "m1"} for n, src in sorted(have.items())]
            return httpx.Response(200, json={"object": "list", "data": data})
        body = json.loads(request.content)
        if request.url.path == "/v1/load_lora_adapter":
            have[body["lora_name"]] = body["lora_path"]
        elif request.url.path == "/v1/unload_lora_adapter":
            have.pop(body["lora_name"], None)
        return httpx.Response(200, text="Success")


class Cluster:
    """A rollout with adapters, its route, a Deployment controller that makes Running pods
    with addresses, and the pods' vLLM servers."""

    def __init__(self, spec: dict[str, Any], adapter_releases: bool = True,
                 status: dict[str, Any] | None = None) -> None:
        self.kube = rollout_on_route(NS, NAME, spec, status)
        self.events: list[RecordEvent] = []
        self.now = T0
        self.servers = Servers()
        self.started: set[str] = set()

        async def post(_body: dict[str, Any], event: RecordEvent) -> None:
            self.events.append(event)

        self.deps = Deps(kube=self.kube, post_event=post, now=lambda: self.now,
                         prometheus_allow=("http://prom:9090",), confine_queries=False,
                         adapter_releases=adapter_releases, adapter_drain_seconds=1.0)
        self.deps.sources[("http://prom:9090", 5.0, None)] = PrometheusCounts(errors=0.0)  # type: ignore[assignment]
        self.deps.lora = VLLMAdapters(httpx.AsyncClient(
            transport=httpx.MockTransport(self.servers.handle)))

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.kube.objects[ROLLOUT].get("status") or {})

    def weights(self) -> dict[str, int]:
        refs = self.kube.objects[ROUTE]["spec"]["rules"][0]["backendRefs"]
        return {ref["name"]: ref["weight"] for ref in refs}

    def pods(self) -> dict[str, dict[str, Any]]:
        return {p.rsplit("/", 1)[1]: o for p, o in self.kube.objects.items()
                if p.startswith(PODS + "/")}

    def controller(self) -> None:
        """The Deployment controller and kubelet: each Deployment's pods, Running at an IP."""
        for path, d in list(self.kube.objects.items()):
            if not path.startswith(DEPLOYMENTS + "/"):
                continue
            name, n = d["metadata"]["name"], d["spec"]["replicas"]
            mine = sorted(p for p in self.pods() if p.startswith(name + "-"))
            for i in range(len(mine), n):
                pod = f"{name}-{i}"
                self.started.add(pod)
                self.kube.put(f"{PODS}/{pod}", {
                    "metadata": {"name": pod, "namespace": NS,
                                 "labels": copy.deepcopy(d["spec"]["template"]["metadata"]
                                                         ["labels"])},
                    "status": {"phase": "Running", "podIP": f"10.0.{len(self.started)}.1",
                               "conditions": [{"type": "ContainersReady", "status": "True"}],
                               "containerStatuses": [{"state": {"running": {
                                   "startedAt": "2026-12-01T11:00:00Z"}}}]}})
            for extra in mine[n:]:
                del self.kube.objects[f"{PODS}/{extra}"]
            d["status"] = {"readyReplicas": n, "availableReplicas": n}

    def reconcile(self, seconds: float = 2) -> float:
        self.now += timedelta(seconds=seconds)
        self.kube.calls.clear()
        delay = asyncio.run(reconcile(self.deps, copy.deepcopy(self.kube.objects[ROLLOUT])))
        self.controller()
        return delay

    def run_until(self, done: Any, limit: int = 400, **kw: Any) -> None:
        for _ in range(limit):
            self.reconcile(**kw)
            if done(self):
                return
        raise AssertionError(f"not reached: {self.status.get('message')}")

    def change(self, spec: dict[str, Any]) -> None:
        obj = self.kube.objects[ROLLOUT]
        obj["spec"] = spec
        obj["metadata"]["generation"] += 1


def versions(c: Cluster) -> dict[str, str | None]:
    return {p["pod"]: p.get("version") for p in c.status.get("adapterPods") or []}


def healthy_on_v1() -> Cluster:
    c = Cluster(lora_spec())
    c.run_until(lambda c: c.status.get("phase") == "Healthy")
    return c


def test_the_first_release_loads_every_new_pod_before_it_joins_the_versions_service() -> None:
    c = Cluster(lora_spec())
    c.reconcile()
    stable = c.status["stableRevision"]
    # Its Service first (the route names it), then the template's Deployment: no template Service
    creates = [path for method, path, _ in c.kube.writes("POST")]
    assert creates == [SERVICES, DEPLOYMENTS]
    (svc,) = [o for p, o in c.kube.objects.items() if p.startswith(SERVICES + "/")]
    assert svc["metadata"]["name"] == f"{NAME}-{stable}"
    assert LABEL_ADAPTER_SET in svc["spec"]["selector"]
    assert {p["metadata"]["labels"][LABEL_ADAPTER_SET] for p in c.pods().values()} == {"pending"}
    assert c.weights() == {f"{NAME}-{stable}": 100}
    c.run_until(lambda c: c.status.get("phase") == "Healthy")
    # every pod was loaded, read back, then admitted to the version's set
    assert {p["metadata"]["labels"][LABEL_ADAPTER_SET] for p in c.pods().values()} == {
        svc["spec"]["selector"][LABEL_ADAPTER_SET]}
    assert all(s == {"support": V1} for s in c.servers.loaded.values())
    assert set(versions(c).values()) == {stable}


def test_an_adapter_release_moves_running_pods_and_starts_none() -> None:
    c = healthy_on_v1()
    v1, started = c.status["stableRevision"], set(c.started)
    c.change(lora_spec(V2))
    c.run_until(lambda c: c.status.get("canaryRevision") is not None)
    v2 = c.status["canaryRevision"]
    # the canary's weight waits for its pod to be moved, loaded and admitted
    c.run_until(lambda c: (c.status.get("canaryWeight") or 0) == 5)
    assert list(versions(c).values()).count(v2) == 1
    assert c.weights() == {f"{NAME}-{v1}": 95, f"{NAME}-{v2}": 5}
    assert [e.reason for e in c.events].count(r.NEW_RELEASE) == 1
    # the whole release, promoted by the clock (no metrics: the steps' pauses)
    c.run_until(lambda c: c.status.get("stableRevision") == v2
                and set(versions(c).values()) == {v2}, limit=2000, seconds=5)
    assert c.started == started  # no pod started: one Deployment, the same pods
    assert all(s == {"support": V2} for s in c.servers.loaded.values())
    cost = c.status["releaseCost"]
    assert (cost["podsStarted"], cost["podSeconds"]) == (0, 0)
    (deployment,) = [o for p, o in c.kube.objects.items() if p.startswith(DEPLOYMENTS + "/")]
    template = deployment["metadata"]["labels"]["rollouts.inference.dev/revision"]
    assert c.status["selector"].endswith(f"in ({template})")  # the pods' label, not versions'
    assert c.status["replicas"] == 4


def test_a_refused_pod_write_is_an_event_and_is_retried() -> None:
    c = Cluster(lora_spec())
    c.reconcile()
    c.reconcile()  # pods exist now, loaded this round
    pod = sorted(c.pods())[0]
    c.kube.fail[("PATCH", f"{PODS}/{pod}")] = KubeError(403, "PATCH", f"{PODS}/{pod}",
                                                        "pods is forbidden")
    c.run_until(lambda c: any(e.reason == r.ADAPTER_MOVE_FAILED for e in c.events), limit=20)
    failed = next(e for e in c.events if e.reason == r.ADAPTER_MOVE_FAILED)
    assert failed.type == "Warning" and pod in failed.message and "forbidden" in failed.message
    assert c.status.get("phase") != "Healthy"  # that pod is in no Service yet
    del c.kube.fail[("PATCH", f"{PODS}/{pod}")]
    c.run_until(lambda c: c.status.get("phase") == "Healthy", limit=40)


def test_without_the_flag_a_spec_naming_adapters_is_refused_whole() -> None:
    c = Cluster(lora_spec(), adapter_releases=False)
    c.reconcile()
    valid = next(x for x in c.status["conditions"] if x["type"] == "Valid")
    assert valid["status"] == "False" and ADAPTERS_NOT_BUILT in valid["message"]
    assert c.kube.writes("POST") == [] and c.pods() == {}


def test_adapters_added_to_pods_started_without_them_need_a_template_change() -> None:
    plain = manifest_spec()
    plain["template"] = lora_spec()["template"]  # runtime LoRA on, no adapters yet
    c = Cluster(plain)
    c.run_until(lambda c: c.status.get("phase") == "Healthy")
    stable, deployments = c.status["stableRevision"], dict(c.kube.objects)
    c.change({**plain, "adapters": [{"name": "support", "source": V1}]})
    c.reconcile()
    valid = next(x for x in c.status["conditions"] if x["type"] == "Valid")
    assert valid["status"] == "False" and ADAPTERS_ON_PLAIN_PODS in valid["message"]
    assert c.status["stableRevision"] == stable and not c.status.get("canaryRevision")
    assert [p for p in c.kube.objects if p.startswith(DEPLOYMENTS + "/")] == [
        p for p in deployments if p.startswith(DEPLOYMENTS + "/")]


def test_removing_the_adapters_unloads_them_from_every_pod_and_starts_none() -> None:
    c = healthy_on_v1()
    v1, started = c.status["stableRevision"], set(c.started)
    plain = lora_spec()
    del plain["adapters"]  # the same template: a release of the empty set
    c.change(plain)
    c.run_until(lambda c: c.status.get("canaryRevision") is not None)
    bare = c.status["canaryRevision"]
    assert bare != v1
    # it runs the steps like any adapter release: one pod unloaded and moved for 5 %
    c.run_until(lambda c: (c.status.get("canaryWeight") or 0) == 5)
    assert list(versions(c).values()).count(bare) == 1
    c.run_until(lambda c: c.status.get("phase") == "Healthy" and c.status.get("stableRevision")
                == bare and set(versions(c).values()) == {bare}, limit=2000, seconds=5)
    assert c.started == started  # the same pods, none started
    assert all(s == {} for s in c.servers.loaded.values())  # nothing loaded anywhere
    assert all(p["adapters"] == {} for p in c.status["adapterPods"])
    # and the old version's Service goes once the release has settled
    c.run_until(lambda c: f"{SERVICES}/{NAME}-{v1}" not in c.kube.objects, limit=60, seconds=10)
    assert c.weights() == {f"{NAME}-{bare}": 100}


def test_a_draining_pod_keeps_its_adapters_while_its_vllm_has_requests_in_flight() -> None:
    c = healthy_on_v1()
    c.change(lora_spec(V2))
    c.run_until(lambda c: any(p["metadata"]["labels"][LABEL_ADAPTER_SET] == "moving"
                              for p in c.pods().values()), seconds=0.5)
    (moving,) = [p for p in c.pods().values()
                 if p["metadata"]["labels"][LABEL_ADAPTER_SET] == "moving"]
    ip = moving["status"]["podIP"]
    c.servers.running[ip] = 2  # a long generation on the old version
    for _ in range(20):  # 40 s: well past the least drain (1 s here)
        c.reconcile(seconds=2)
    assert c.servers.loaded[ip] == {"support": V1}  # not changed under it
    assert f"GET {ip}/metrics" in c.servers.calls
    c.servers.running[ip] = 0  # it finished
    c.run_until(lambda c: c.servers.loaded[ip] == {"support": V2}, limit=5)
