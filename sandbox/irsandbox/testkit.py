"""Helpers for tests and demos on the sandbox: vLLM Deployments, Services, HTTPRoutes, and waits
on what the bridge and the gateway publish. Manifests are plain dicts."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from kubernetes import client
from kubernetes.client.rest import ApiException

from .common import read_json, state_dir
from .podspec import LABEL_REVISION, LABEL_ROLLOUT

T = TypeVar("T")
HTTPROUTE = ("gateway.networking.k8s.io", "v1", "httproutes")
INFERENCEPOOL = ("inference.networking.k8s.io", "v1", "inferencepools")


def wait_for(check: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.1) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (and the last
    value or exception) on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = check()
            if value:
                return value
            last = value
        except (ApiException, httpx.HTTPError, OSError, KeyError, ValueError) as e:
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what} (last: {last})")
        time.sleep(interval)


# --- manifests -------------------------------------------------------------------------------


def vllm_deployment(name: str, *, model: str = "meta-llama/Llama-3.1-8B-Instruct",
                    served_name: str | None = "llama", replicas: int = 1, rollout: str = "chat",
                    revision: str = "r1", annotations: dict[str, str] | None = None,
                    labels: dict[str, str] | None = None, gpus: int = 1) -> dict[str, Any]:
    """A vLLM Deployment as the operator would create for one revision."""
    pod_labels = {"app": rollout, LABEL_ROLLOUT: rollout, LABEL_REVISION: revision,
                  **(labels or {})}
    args = ["--model", model, "--max-num-seqs", "256", "--max-model-len", "8192"]
    if served_name:
        args += ["--served-model-name", served_name]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": dict(pod_labels)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {LABEL_ROLLOUT: rollout, LABEL_REVISION: revision}},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": dict(annotations or {})},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "vllm", "image": "vllm/vllm-openai:v0.11.0", "args": args,
                        "ports": [{"name": "http", "containerPort": 8000}],
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                      "requests": {"nvidia.com/gpu": str(gpus)}},
                    }],
                },
            },
        },
    }


def service(name: str, rollout: str, revision: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {LABEL_ROLLOUT: rollout, LABEL_REVISION: revision},
                 "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }


def httproute(name: str, backends: list[tuple[str, int]], hostnames: list[str] | None = None,
              kind: str = "Service") -> dict[str, Any]:
    refs = []
    for svc, weight in backends:
        ref: dict[str, Any] = {"name": svc, "weight": weight}
        if kind == "InferencePool":
            ref.update({"group": INFERENCEPOOL[0], "kind": "InferencePool"})
        else:
            ref["port"] = 8000
        refs.append(ref)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": "sandbox-gateway"}],
                 "hostnames": hostnames or [], "rules": [{"backendRefs": refs}]},
    }


def inference_pool(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": selector}, "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}},
    }


# --- the cluster -----------------------------------------------------------------------------


class Sandbox:
    """Thin client over the sandbox: create objects, read the bridge's and gateway's state."""

    def __init__(self, api: client.ApiClient, state: Path | None = None,
                 prometheus_url: str = "", gateway_url: str = "") -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.state = state or state_dir()
        self.prometheus_url = prometheus_url
        self.gateway_url = gateway_url

    # objects
    def create(self, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        kind = obj["kind"]
        if kind == "Deployment":
            return self.apps.create_namespaced_deployment(ns, obj).to_dict()
        if kind == "Service":
            return self.core.create_namespaced_service(ns, obj).to_dict()
        if kind == "Pod":
            return self.core.create_namespaced_pod(ns, obj).to_dict()
        if kind == "HTTPRoute":
            return self.custom.create_namespaced_custom_object(*HTTPROUTE[:2], ns, HTTPROUTE[2],
                                                               obj)
        if kind == "InferencePool":
            return self.custom.create_namespaced_custom_object(
                *INFERENCEPOOL[:2], ns, INFERENCEPOOL[2], obj)
        raise ValueError(f"unsupported kind {kind}")

    def route(self, ns: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(*HTTPROUTE[:2], ns, HTTPROUTE[2], name)

    def set_weights(self, ns: str, name: str, weights: dict[str, int]) -> int:
        """Set the route's backendRef weights by backend name; returns the new generation."""
        route = self.route(ns, name)
        for rule in route["spec"]["rules"]:
            for ref in rule.get("backendRefs") or []:
                if ref["name"] in weights:
                    ref["weight"] = weights[ref["name"]]
        patched = self.custom.patch_namespaced_custom_object(
            *HTTPROUTE[:2], ns, HTTPROUTE[2], name, {"spec": {"rules": route["spec"]["rules"]}})
        return int(patched["metadata"]["generation"])

    def pods(self, ns: str, selector: str = "") -> list[dict[str, Any]]:
        return [self.api.sanitize_for_serialization(p)
                for p in self.core.list_namespaced_pod(ns, label_selector=selector).items]

    def ready_pods(self, ns: str, selector: str = "") -> list[dict[str, Any]]:
        out = []
        for pod in self.pods(ns, selector):
            conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
            if conds.get("Ready") == "True" and not pod["metadata"].get("deletionTimestamp"):
                out.append(pod)
        return out

    # bridge and gateway
    def endpoints(self) -> dict[str, Any]:
        return (read_json(self.state / "bridge" / "endpoints.json", {}) or {}).get("pods") or {}

    def gateway_state(self) -> dict[str, Any]:
        return read_json(self.state / "gateway" / "state.json", {}) or {}

    def wait_serving(self, ns: str, selector: str, count: int, timeout: float = 60) -> list[str]:
        """Wait until ``count`` Ready pods match and each has a serving simulator; returns keys."""
        def check() -> list[str] | None:
            pods = self.ready_pods(ns, selector)
            eps = self.endpoints()
            keys = sorted(f"{ns}/{p['metadata']['name']}" for p in pods)
            if len(keys) == count and all(k in eps for k in keys):
                return keys
            return None
        return wait_for(check, timeout, f"{count} Ready, serving pods {selector} in {ns}")

    def wait_programmed(self, ns: str, route: str, pods_per_backend: dict[str, int],
                        timeout: float = 30) -> dict[str, Any]:
        """Wait until the gateway runs the route's current generation with that many pods behind
        each named backend (weight-0 backends included)."""
        def check() -> dict[str, Any] | None:
            gen = int(self.route(ns, route)["metadata"]["generation"])
            st = (self.gateway_state().get("routes") or {}).get(f"{ns}/{route}")
            if not st or st["generation"] != gen:
                return None
            have = {b["ref"].split("/")[-1]: len(b["pods"])
                    for rule in st["rules"] for b in rule["backends"]}
            if all(have.get(k) == v for k, v in pods_per_backend.items()):
                return st
            return None
        return wait_for(check, timeout, f"gateway to program {ns}/{route} {pods_per_backend}")

    def prom(self, query: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.prometheus_url}/api/v1/query", params={"query": query},
                      timeout=5, trust_env=False)
        r.raise_for_status()
        body = r.json()
        if body.get("status") != "success":
            raise ValueError(json.dumps(body))
        return list(body["data"]["result"])

    def prom_value(self, query: str) -> float | None:
        result = self.prom(query)
        if not result:
            return None
        value = float(result[0]["value"][1])
        return None if math.isnan(value) else value
