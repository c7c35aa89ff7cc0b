"""Drive the operator on the sandbox: the shared harness of the end-to-end tests and the demo.

Given a running sandbox (``.sandbox/env``), it installs the CRD, starts and kills the operator as a
real process, applies rollouts, and waits for conditions with a clear message on timeout.  It uses
the ``kubernetes`` client directly: the operator under test must not be its own witness.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / ".sandbox"
CRD_FILE = ROOT / "crds" / "rollouts.inference.dev_inferencerollouts.yaml"
GROUP, VERSION, PLURAL = "rollouts.inference.dev", "v1alpha1", "inferencerollouts"
T = TypeVar("T")


def sandbox_env() -> dict[str, str]:
    """The variables ``sandbox/up.sh`` wrote to ``.sandbox/env`` (``export K=V`` lines)."""
    env_file = SANDBOX / "env"
    if not env_file.exists():
        raise RuntimeError(f"{env_file} is missing: start the sandbox with `make sandbox-up`")
    out = {}
    for line in env_file.read_text().splitlines():
        line = line.strip().removeprefix("export ").strip()
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key] = value.strip().strip('"').strip("'")
    return out


def wait_for(check: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.5) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


class Cluster:
    """The sandbox's API server, seen through the official client."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env or sandbox_env()
        self.api = config.new_client_from_config(config_file=self.env["KUBECONFIG"])
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.ext = client.ApiextensionsV1Api(self.api)

    # --- setup ------------------------------------------------------------------------------

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

        def established() -> bool:
            crd = self.ext.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True"
                       for c in crd.status.conditions or [])
        wait_for(established, 30, f"CRD {name} Established")

    def create_namespace(self, name: str) -> None:
        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except ApiException as e:
            if e.status != 409:
                raise

    def delete_namespace(self, name: str) -> None:
        try:
            self.core.delete_namespace(name)
        except ApiException as e:
            if e.status != 404:
                raise

    def namespace_gone(self, name: str) -> bool:
        """True once the namespace no longer exists (not merely Terminating)."""
        try:
            self.core.read_namespace(name)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    # --- rollouts ---------------------------------------------------------------------------

    def apply_rollout(self, ns: str, manifest: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(manifest)
        body.setdefault("apiVersion", f"{GROUP}/{VERSION}")
        body.setdefault("kind", "InferenceRollout")
        body["metadata"]["namespace"] = ns
        name = body["metadata"]["name"]
        try:
            current = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise
            out: dict[str, Any] = self.custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, body)
            return out
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        replaced: dict[str, Any] = self.custom.replace_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name, body)
        return replaced

    def rollout(self, ns: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, name)
        return out

    def status(self, ns: str, name: str) -> dict[str, Any]:
        return self.rollout(ns, name).get("status") or {}

    def request(self, ns: str, name: str, request: str) -> None:
        """What ``kubectl inference-rollout <verb>`` writes."""
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, name, {"status": {"requests": {request: True}}})

    def delete_rollout(self, ns: str, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)

    def route_weights(self, ns: str, route: str) -> dict[str, int]:
        """Backend weights by Service name as the API server holds them."""
        try:
            obj = self.custom.get_namespaced_custom_object(
                "gateway.networking.k8s.io", "v1", ns, "httproutes", route)
        except ApiException as e:
            if e.status == 404:
                return {}
            raise
        rules = obj.get("spec", {}).get("rules") or [{}]
        return {ref["name"]: int(ref.get("weight", 1)) for ref in rules[0].get("backendRefs") or []}

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


class OperatorProcess:
    """The operator as a real process (``inference-rollout operator``), killable at will."""

    def __init__(self, env: dict[str, str], log_name: str = "operator",
                 namespaces: list[str] | None = None, metrics_port: int = 18481,
                 liveness_port: int = 18480, extra_args: tuple[str, ...] = (),
                 unset_env: tuple[str, ...] = ()) -> None:
        """``extra_args`` are appended to the command line; ``unset_env`` names variables the
        process must not inherit (e.g. ``KUBECONFIG``, to prove ``--kubeconfig`` alone works)."""
        self.env, self.namespaces = env, namespaces
        self.extra_args, self.unset_env = extra_args, unset_env
        self.metrics_port, self.liveness_port = metrics_port, liveness_port
        self.log_path = SANDBOX / "logs" / f"{log_name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        scope = (["--all-namespaces"] if not self.namespaces
                 else [a for ns in self.namespaces for a in ("--namespace", ns)])
        cmd = [sys.executable, "-m", "inference_rollout", "operator", *scope,
               "--log-format", "json", "--metrics-port", str(self.metrics_port),
               "--liveness-port", str(self.liveness_port)]
        if self.env.get("GATEWAY_URL"):
            # no cluster DNS here: the gateway forwards <svc>.<ns>.svc to the Service's pods
            cmd += ["--service-proxy", self.env["GATEWAY_URL"]]
        cmd += self.extra_args
        env = {**os.environ, **self.env,
               "PYTHONPATH": f"{ROOT / 'operator'}:{os.environ.get('PYTHONPATH', '')}"}
        for name in self.unset_env:
            env.pop(name, None)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     cwd=ROOT)
        log.close()
        wait_for(self._live, 30, f"operator liveness on :{self.liveness_port} "
                 f"(log: {self.log_path})")

    def _live(self) -> bool:
        import urllib.request
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"operator exited; see {self.log_path}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz",
                                        timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metrics(self) -> str:
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=2) as r:
            return str(r.read().decode())

    def kill(self) -> None:
        """SIGKILL: no cleanup, no final status write — the crash the design must survive."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def summary_line(status: dict[str, Any]) -> str:
    analysis = status.get("analysis") or {}
    metrics = "; ".join(
        f"{k}={'-' if v.get('value') is None else format(v['value'], '.4g')}"
        f"({v.get('verdict')}, {v.get('threshold')}"
        f"{', ' + v['error'] if v.get('error') else ''})" for k, v in sorted(analysis.items()))
    return (f"phase={status.get('phase')} step={status.get('currentStep')} "
            f"weight={status.get('canaryWeight')} {metrics}")


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
