"""The sandbox seen through the official ``kubernetes`` client: the one client of the tests, the
benchmarks and the demo.

It creates and reads objects (InferenceRollouts, Deployments, Services, HTTPRoutes, pools),
requests steering verbs the way ``kubectl inference-rollout`` does, and reads what the sandbox's
bridge, gateway and Prometheus publish.  The operator under test must not be its own witness, so
nothing here imports the operator.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import components
from .common import REPO, operator_pythonpath, read_json, sandbox_env, state_dir, wait_for
from .manifests import GATEWAY_PARENT

CRD_FILE = REPO / "crds" / "rollouts.inference.dev_inferencerollouts.yaml"
GROUP, VERSION, PLURAL = "rollouts.inference.dev", "v1alpha1", "inferencerollouts"
HTTPROUTE = ("gateway.networking.k8s.io", "v1", "httproutes")
INFERENCEPOOL = ("inference.networking.k8s.io", "v1", "inferencepools")
#: The sandbox's Gateway (namespace, name), which Traefik serves (sandbox/up.d/65-traefik.sh)
TRAEFIK_GATEWAY = (GATEWAY_PARENT["namespace"], GATEWAY_PARENT["name"])
TRAEFIK_CONTROLLER = "traefik.io/gateway-controller"
CONFLICT_RETRIES = 5  # a replace that meets a status write in between is read again


def api_answers(env: dict[str, str]) -> bool:
    """Does the sandbox's API server answer with the kubeconfig ``env`` names?"""
    kubeconfig = env.get("KUBECONFIG")
    if not kubeconfig or not Path(kubeconfig).exists():
        return False
    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except Exception:
        return False
    try:
        client.VersionApi(api).get_code(_request_timeout=5)
        return True
    except Exception:
        return False
    finally:
        api.close()


def ignore_status(status: int, call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, or None when the API server answers ``status`` (404 for "already
    gone", 409 for "already there")."""
    try:
        return call(*args, **kwargs)
    except ApiException as e:
        if e.status != status:
            raise
        return None


class Cluster:
    """The sandbox's API server, its gateway's and bridge's state, and its Prometheus."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env or sandbox_env()
        if not self.env.get("KUBECONFIG"):
            raise RuntimeError(f"{state_dir() / 'env'} names no KUBECONFIG: start the sandbox "
                               "with `make sandbox-up`")
        owner = components.foreign_owner(state_dir())
        if owner is not None and os.environ.get("IR_SHARE_SANDBOX") != "1":
            raise RuntimeError(components.foreign_owner_message(owner) + " (IR_SHARE_SANDBOX=1 "
                               "drives it anyway, knowing its CRD will be replaced by yours)")
        self.api = config.new_client_from_config(config_file=self.env["KUBECONFIG"])
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.ext = client.ApiextensionsV1Api(self.api)
        self.state = Path(self.env.get("IR_STATE") or Path(self.env["KUBECONFIG"]).parent)
        self.prometheus_url = self.env.get("PROMETHEUS_URL", "")
        self.gateway_url = self.env.get("GATEWAY_URL", "")
        # Traefik, the Gateway API implementation beside the nginx translator (up.d/65-traefik.sh)
        self.traefik_url = self.env.get("TRAEFIK_URL", "")
        self.traefik_api_url = (f"http://127.0.0.1:{self.env['IR_TRAEFIK_METRICS_PORT']}"
                                if self.env.get("IR_TRAEFIK_METRICS_PORT") else "")

    def close(self) -> None:
        self.api.close()

    # --- setup ------------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
        """``kubectl …`` against this sandbox; a failure raises with kubectl's own words."""
        r = subprocess.run(["kubectl", *args], env={**os.environ, **self.env}, input=stdin,
                           text=True, capture_output=True, timeout=timeout, check=False)
        if r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def install_crd(self) -> None:
        """Server-side apply of the committed CRD, then wait until it is Established."""
        body = yaml.safe_load(CRD_FILE.read_text())
        name = body["metadata"]["name"]
        try:
            self.ext.read_custom_resource_definition(name)
            self.ext.patch_custom_resource_definition(
                name, body, field_manager="inference-rollout-tests", force=True,
                _content_type="application/apply-patch+yaml")
        except ApiException as e:
            if e.status != 404:
                raise
            self.ext.create_custom_resource_definition(body)
        self.wait_crd_established(name)

    def wait_crd_established(self, name: str) -> None:
        def established() -> bool:
            crd = self.ext.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True"
                       for c in crd.status.conditions or [])
        wait_for(established, 30, f"CRD {name} Established", tolerate=())

    def create_namespace(self, name: str) -> None:
        ignore_status(409, self.core.create_namespace, {"metadata": {"name": name}})

    def delete_namespace(self, name: str) -> None:
        ignore_status(404, self.core.delete_namespace, name)

    def namespace_gone(self, name: str) -> bool:
        """True once the namespace no longer exists (not merely Terminating)."""
        return ignore_status(404, self.core.read_namespace, name) is None

    def terminating_namespaces(self, prefix: str) -> list[str]:
        return sorted(n.metadata.name for n in self.core.list_namespace().items
                      if n.metadata.name.startswith(prefix) and n.metadata.deletion_timestamp)

    def finish_deletions(self, prefix: str, wait: float = 90) -> list[str]:
        """Namespaces ``<prefix>*`` being deleted after the operator that watched them stopped:
        their rollouts keep the finalizer and the namespace stays Terminating (later runs then
        share a sandbox full of them).  Finish them as docs/install.md's uninstall says, with
        ``inference-rollout release-finalizers`` (the operator's own cleanup, run as a user runs
        it: a process), until they are gone or ``wait`` seconds pass; returns those left.

        Run again every few seconds, not once: the namespace controller marks a namespace's
        rollouts for deletion some seconds after the namespace itself (pods first), and the
        command acts only on rollouts already marked."""
        stuck = self.terminating_namespaces(prefix)
        deadline = time.monotonic() + wait
        last = ""
        while stuck:
            args = [a for ns in stuck for a in ("--namespace", ns)]
            done = subprocess.run(
                [sys.executable, "-m", "inference_rollout", "release-finalizers", *args,
                 "--kubeconfig", self.env["KUBECONFIG"]],
                env={**os.environ, "PYTHONPATH": operator_pythonpath()},
                capture_output=True, text=True, timeout=120, check=False)
            last = f"exit {done.returncode}: {done.stdout}{done.stderr}"
            stuck = [ns for ns in stuck if not self.namespace_gone(ns)]
            if not stuck or time.monotonic() >= deadline:
                break
            time.sleep(3)
        if stuck:
            print(f"namespaces {stuck} still Terminating; release-finalizers said {last}")
        return stuck

    # --- rollouts ---------------------------------------------------------------------------

    def apply_rollout(self, ns: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the InferenceRollout, or replace the one of that name.

        A replace carries the resourceVersion just read, and the operator writes status (which
        moves the resourceVersion) several times a second mid-release: a 409 is read again and
        retried, as ``kubectl apply`` would, instead of failing the test (CI run of 2026-12-04).
        """
        body = copy.deepcopy(manifest)
        body.setdefault("apiVersion", f"{GROUP}/{VERSION}")
        body.setdefault("kind", "InferenceRollout")
        body["metadata"]["namespace"] = ns
        name = body["metadata"]["name"]
        for attempt in range(CONFLICT_RETRIES):
            current = ignore_status(404, self.rollout, ns, name)
            if current is None:
                created: dict[str, Any] = self.custom.create_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, body)
                return created
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                replaced: dict[str, Any] = self.custom.replace_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, name, body)
                return replaced
            except ApiException as err:
                if err.status != 409 or attempt == CONFLICT_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def rollout(self, ns: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name)
        return out

    def rollouts(self, ns: str, **kwargs: Any) -> list[dict[str, Any]]:
        return list(self.custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, **kwargs)["items"])

    def status(self, ns: str, name: str) -> dict[str, Any]:
        return self.rollout(ns, name).get("status") or {}

    def request(self, ns: str, name: str, request: str) -> None:
        """What ``kubectl inference-rollout <verb>`` writes."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, name, {"status": {"requests": {request: True}}})

    def delete_rollout(self, ns: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)

    def events(self, ns: str, name: str) -> list[dict[str, Any]]:
        items = self.core.list_namespaced_event(
            ns, field_selector=f"involvedObject.name={name}").items
        return [{"type": e.type, "reason": e.reason, "message": e.message} for e in items]

    def deployments(self, ns: str) -> dict[str, dict[str, int]]:
        out = {}
        for d in self.apps.list_namespaced_deployment(ns).items:
            out[d.metadata.name] = {"desired": d.spec.replicas or 0,
                                    "ready": d.status.ready_replicas or 0}
        return out

    # --- other objects ----------------------------------------------------------------------

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

    def route_weights(self, ns: str, route: str) -> dict[str, int]:
        """Backend weights by Service name as the API server holds them ({} for no route)."""
        obj = ignore_status(404, self.route, ns, route)
        if obj is None:
            return {}
        rules = obj.get("spec", {}).get("rules") or [{}]
        return {ref["name"]: int(ref.get("weight", 1)) for ref in rules[0].get("backendRefs") or []}

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

    def pool(self, ns: str, name: str) -> dict[str, Any] | None:
        """The InferencePool, or None when there is none."""
        out: dict[str, Any] | None = ignore_status(
            404, self.custom.get_namespaced_custom_object, *INFERENCEPOOL[:2], ns,
            INFERENCEPOOL[2], name)
        return out

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

    # --- the bridge, the gateway and Prometheus ---------------------------------------------

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
        """Wait until the gateway serving the route runs its current generation with that many
        pods behind each named backend (weight-0 backends included): Traefik for a route under
        the sandbox's Gateway, the nginx translator for any other parent."""
        if self._under_traefik(self.route(ns, route)):
            return self._wait_traefik_runs(ns, route, pods_per_backend, timeout)

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

    @staticmethod
    def _under_traefik(route: dict[str, Any]) -> bool:
        ns = route["metadata"]["namespace"]
        return any((ref.get("namespace") or ns, ref.get("name")) == TRAEFIK_GATEWAY
                   for ref in route["spec"].get("parentRefs") or [])

    def traefik_backends(self, ns: str, route: str) -> dict[str, tuple[int, int]]:
        """What Traefik runs for a route under the sandbox's Gateway (its API: the configuration
        in force, not the one it was told): backend Service -> (weight, servers that are pod
        addresses). Traefik names a route's services ``httproute-<ns>-<route>-gw-<gateway ns>-
        <gateway>-ep-<entry point>-<rule>-<hash>``, and each backend's
        ``…-svc-<ns>-<service>-<index>``."""
        services = httpx.get(f"{self.traefik_api_url}/api/http/services", timeout=5,
                             trust_env=False).json()
        by_name = {s["name"]: s for s in services}
        prefix = f"httproute-{ns}-{route}-gw-{'-'.join(TRAEFIK_GATEWAY)}-ep-"
        out: dict[str, tuple[int, int]] = {}
        for s in services:
            if not (s["name"].startswith(prefix) and s.get("weighted")):
                continue
            for child in s["weighted"]["services"]:
                backend = child["name"].split(f"-svc-{ns}-", 1)[-1].rsplit("-", 1)[0]
                lb = (by_name.get(child["name"])
                      or by_name.get(f"{child['name']}@kubernetesgateway") or {}
                      ).get("loadBalancer") or {}
                pod_servers = [srv["url"] for srv in lb.get("servers") or []
                               if srv.get("url", "").startswith("http://10.")]
                out[backend] = (int(child.get("weight", 1)), len(pod_servers))
        return out

    def _wait_traefik_runs(self, ns: str, route: str, pods_per_backend: dict[str, int],
                           timeout: float) -> dict[str, tuple[int, int]]:
        """Until Traefik has accepted the route's current generation and runs its weights with
        ``pods_per_backend`` pods (a backend Traefik does not run counts as 0 pods)."""
        def check() -> dict[str, tuple[int, int]] | None:
            r = self.route(ns, route)
            gen = int(r["metadata"]["generation"])
            accepted = any(c.get("type") == "Accepted" and c.get("status") == "True"
                           and c.get("observedGeneration") == gen
                           for p in (r.get("status") or {}).get("parents") or []
                           if p.get("controllerName") == TRAEFIK_CONTROLLER
                           for c in p.get("conditions") or [])
            if not accepted:
                return None
            running = self.traefik_backends(ns, route)
            weights = {b["name"]: int(b.get("weight", 1)) for rule in r["spec"]["rules"]
                       for b in rule.get("backendRefs") or []}
            for name, pods in pods_per_backend.items():
                weight, servers = running.get(name, (weights.get(name), 0))
                if servers != pods or weight != weights.get(name):
                    return None
            return running
        return wait_for(check, timeout, f"Traefik to run {ns}/{route} {pods_per_backend}",
                        interval=0.2)

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
