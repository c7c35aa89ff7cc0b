"""Given/When/Then for rollouts on the sandbox: small verbs so each test reads as its scenario."""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from irsandbox.harness import ROOT, Cluster, OperatorProcess, summary_line, wait_for
from irsandbox.loadgen import LoadReport, run_load

MODEL = "chat-model"

#: Short stages so a whole release takes about a minute; 1s scrapes make 5s windows meaningful.
FAST_STEPS = [{"weight": 5, "pause": "12s"}, {"weight": 20, "pause": "12s"},
              {"weight": 50, "pause": "12s"}, {"weight": 100}]


def rollout(name: str, *, version: str = "v1", ttft_ms: int = 5, failure_rate: float = 0,
            business_fail_rate: float = 0, gpus: int = 1, replicas: int = 2,
            steps: list[dict[str, Any]] | None = None,
            metrics: list[dict[str, Any]] | None = None,
            analysis: dict[str, Any] | None = None, prometheus: str,
            progress_deadline: str = "60s") -> dict[str, Any]:
    """An InferenceRollout whose pods the sandbox bridge backs with vLLM simulators."""
    annotations = {"sim.inference.dev/ttft-ms": str(ttft_ms),
                   "sim.inference.dev/itl-ms": "1",
                   # A short model load: Ready only once the simulator and its shim serve, so a
                   # weight raised onto a Ready pod never meets the gateway's empty upstream.
                   "sim.inference.dev/startup-seconds": "3",
                   "sim.inference.dev/failure-rate": f"{failure_rate:g}",
                   "sim.inference.dev/business-fail-rate": f"{business_fail_rate:g}"}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "containers": [{
                        "name": "vllm", "image": f"vllm/vllm-openai:{version}",
                        "args": ["--model", MODEL, "--max-num-seqs", "32"],
                        "ports": [{"name": "http", "containerPort": 8000}],
                        "resources": {"limits": {"nvidia.com/gpu": gpus}},
                    }],
                    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists",
                                     "effect": "NoSchedule"}],
                },
            },
            "traffic": {"gatewayAPI": {"parentRefs": [{"name": "sandbox"}],
                                       "hostnames": [f"{name}.test"]}},
            "strategy": {"steps": steps or FAST_STEPS, "progressDeadline": progress_deadline,
                         "abortScaleDownDelay": "5s", "scaleDownDelay": "5s"},
            "analysis": {
                "interval": "5s",
                "prometheus": {"address": prometheus, "timeout": "3s", "scrapeInterval": "1s"},
                "minSamples": 3,
                "metrics": metrics if metrics is not None else [
                    {"name": "errors", "template": "error-rate", "max": 0.01}],
                **(analysis or {}),
            },
        },
    }


def with_template(manifest: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The same rollout with a changed pod template (a new release)."""
    m = copy.deepcopy(manifest)
    tmpl = m["spec"]["template"]
    if "version" in changes:
        tmpl["spec"]["containers"][0]["image"] = f"vllm/vllm-openai:{changes['version']}"
    for key, ann in (("ttft_ms", "ttft-ms"), ("failure_rate", "failure-rate"),
                     ("business_fail_rate", "business-fail-rate")):
        if key in changes:
            tmpl["metadata"]["annotations"][f"sim.inference.dev/{ann}"] = f"{changes[key]:g}"
    if "gpus" in changes:
        tmpl["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = changes["gpus"]
    return m


class BackgroundLoad:
    """A steady load through the gateway (a loadgen process) so Prometheus has samples, and the
    business counter per revision is exported for custom business-metric queries."""

    def __init__(self, env: dict[str, str], host: str, rate: float = 20, seconds: int = 900,
                 json_check: bool = False, metrics_port: int | None = None) -> None:
        cmd = [sys.executable, "-m", "irsandbox.loadgen", "--url", env["GATEWAY_URL"],
               "--host", host, "--model", MODEL, "--rate", str(rate), "--duration", str(seconds),
               "--max-tokens", "8"]
        if json_check:
            cmd.append("--json-check")
        if metrics_port:
            cmd += ["--metrics-port", str(metrics_port)]
        log = (ROOT / ".sandbox" / "logs" / f"loadgen-{host}.log").open("ab")
        self.proc = subprocess.Popen(
            cmd, env={**os.environ, **env, "PYTHONPATH": f"{ROOT / 'sandbox'}"},
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def measure_shares(env: dict[str, str], host: str, requests: int = 400) -> LoadReport:
    """Send a burst through nginx and report which revision served each response."""
    return asyncio.run(run_load(env["GATEWAY_URL"], model=MODEL, host=host, rate=0,
                                requests=requests, concurrency=16, max_tokens=4))


class Release:
    """One rollout under test: thin verbs over the cluster and the operator."""

    def __init__(self, cluster: Cluster, op: OperatorProcess, ns: str,
                 manifest: dict[str, Any]) -> None:
        self.cluster, self.op, self.ns = cluster, op, ns
        self.name = manifest["metadata"]["name"]
        # Unique per namespace: the sandbox gateway routes by Host, and a leftover route with
        # the same hostname elsewhere would take this test's traffic.
        self.host = f"{self.name}.{ns}.test"
        self.manifest = self._hosted(manifest)

    def _hosted(self, manifest: dict[str, Any]) -> dict[str, Any]:
        m = copy.deepcopy(manifest)
        gw = m["spec"]["traffic"]["gatewayAPI"]
        if "parentRefs" in gw:
            gw["hostnames"] = [self.host]
        return m

    def apply(self, manifest: dict[str, Any] | None = None) -> None:
        if manifest is not None:
            self.manifest = self._hosted(manifest)
        self.cluster.apply_rollout(self.ns, self.manifest)

    def status(self) -> dict[str, Any]:
        return self.cluster.status(self.ns, self.name)

    def wait(self, check: Any, timeout: float, what: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            st = self.status()
            return st if check(st) else None
        try:
            return wait_for(probe, timeout, f"{self.name}: {what}")
        except TimeoutError as e:
            raise AssertionError(
                f"{e}\nstatus: {summary_line(self.status())}\nmessage: "
                f"{self.status().get('message')}\noperator log:\n{self.op.tail(25)}") from None

    def wait_healthy(self, revision: str | None = None, timeout: float = 120) -> dict[str, Any]:
        return self.wait(lambda s: s.get("phase") == "Healthy" and not s.get("canaryRevision")
                         and (revision is None or s.get("stableRevision") == revision),
                         timeout, f"Healthy{' on ' + revision if revision else ''}")

    def healthy_under_load(self) -> tuple[str, BackgroundLoad]:
        """Given: the rollout applied and Healthy, with steady load through the gateway (stop
        it when done); its stable revision."""
        self.apply()
        stable = str(self.wait_healthy()["stableRevision"])
        return stable, BackgroundLoad(self.cluster.env, self.host)

    def wait_canary(self, timeout: float = 60) -> str:
        st = self.wait(lambda s: bool(s.get("canaryRevision")), timeout, "a canary revision")
        return str(st["canaryRevision"])

    def route(self) -> dict[str, int]:
        """Weights by revision as the HTTPRoute holds them."""
        prefix = f"{self.name}-"
        return {svc.removeprefix(prefix): w
                for svc, w in self.cluster.route_weights(self.ns, self.name).items()}

    def events(self) -> list[str]:
        return [f"{e['reason']}: {e['message']}" for e in self.cluster.events(self.ns, self.name)]


def fresh_namespace(cluster: Cluster, prefix: str) -> Iterator[str]:
    """A new namespace ``<prefix>-<random>``, deleted afterwards (a fixture's body)."""
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    yield ns
    cluster.delete_namespace(ns)


def path_exists(p: Path) -> bool:
    return p.exists()
