"""Flagger on the sandbox: its CRDs from the Go module, the cached binary as a process watching one
namespace (Gateway API provider, the sandbox's Prometheus), and the objects a Flagger user writes
for the same release our rollout makes: a Deployment, a Canary and a MetricTemplate whose PromQL
is our template's, with our sample-count guard folded in.

The binary is built by ``bash sandbox/build.sh peers`` (``$IR_CACHE/bin/flagger-<version>``);
what all peers share is in :mod:`peer`.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import common  # noqa: F401  (the operator export and sandbox/ on the path)

from irsandbox.cluster import Cluster
from irsandbox.common import wait_for
from irsandbox.manifests import GATEWAY_PARENT

from .peer import PeerProcess, binary, module_dir, pinned
from .peer import install_crds as peer_install_crds

VERSION = pinned("FLAGGER_VERSION")
MODULE = f"github.com/fluxcd/flagger@{VERSION}"
GROUP, API = "flagger.app", "v1beta1"


def install_crds(cluster: Cluster) -> None:
    """``artifacts/flagger/crd.yaml`` from the module (Canary, MetricTemplate, AlertProvider)."""
    peer_install_crds(cluster, module_dir(MODULE) / "artifacts/flagger/crd.yaml")


class FlaggerProcess(PeerProcess):
    """``flagger`` watching one namespace; its ``-port`` serves ``/healthz``."""

    def __init__(self, env: dict[str, str], namespace: str) -> None:
        super().__init__(env, "flagger", namespace)

    def command(self) -> list[str]:
        return [str(binary("flagger", VERSION)), "-kubeconfig", self.env["KUBECONFIG"],
                "-mesh-provider", "gatewayapi:v1",
                "-metrics-server", self.env["PROMETHEUS_URL"],
                "-namespace", self.namespace, "-port", str(self.liveness_port),
                "-log-level", "info", "-enable-config-tracking=false"]


# --- what a Flagger user writes -----------------------------------------------------------------


def deployment(name: str, template: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The target Deployment with the pod template of our sandbox rollout (``template``: the
    same simulated vLLM container and ``sim.inference.dev/*`` behaviour; its ``app: <name>``
    label is Flagger's selector)."""
    tmpl = copy.deepcopy(template)
    tmpl["spec"].setdefault("terminationGracePeriodSeconds", 5)
    for c in tmpl["spec"]["containers"]:  # quantities as strings, as the typed client wants
        limits = (c.get("resources") or {}).get("limits") or {}
        limits.update({k: str(v) for k, v in limits.items()})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": tmpl}}


def metric_template(name: str, query: str, prometheus: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{API}", "kind": "MetricTemplate",
            "metadata": {"name": name},
            "spec": {"provider": {"type": "prometheus", "address": prometheus},
                     "query": query}}


def canary(name: str, host: str, interval_s: int, steps: list[int], metric: str,
           threshold: float, progress_deadline_s: int) -> dict[str, Any]:
    """The Canary: HTTPRoute on Gateway ``sandbox`` for ``host``; ``steps`` as stepWeights; one
    custom metric; rollback at the first failed check (``threshold: 1``, as ours)."""
    return {
        "apiVersion": f"{GROUP}/{API}", "kind": "Canary", "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "progressDeadlineSeconds": progress_deadline_s,
            "service": {"port": 8000, "targetPort": "http", "hosts": [host],
                        "gatewayRefs": [dict(GATEWAY_PARENT)]},
            "analysis": {"interval": f"{interval_s}s", "threshold": 1, "stepWeights": steps,
                         "metrics": [{"name": metric, "templateRef": {"name": metric},
                                      "thresholdRange": {"max": threshold},
                                      "interval": f"{interval_s}s"}]}}}


def guarded(value: str, samples: str | None, min_samples: int) -> str:
    """Our value query, empty unless the sample-count guard holds: Flagger then reports "no
    values found" and halts the step, as our operator waits for samples."""
    if not samples:
        return value
    return f"({value}) and on() (({samples}) >= {min_samples})"


class FlaggerObjects:
    """Create and change the Flagger-side objects of one namespace."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.cluster, self.ns = cluster, ns

    def create(self, obj: dict[str, Any]) -> None:
        if obj["kind"] == "Deployment":
            self.cluster.apps.create_namespaced_deployment(self.ns, obj)
            return
        plural = {"Canary": "canaries", "MetricTemplate": "metrictemplates"}[obj["kind"]]
        self.cluster.custom.create_namespaced_custom_object(GROUP, API, self.ns, plural, obj)

    def canary(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.cluster.custom.get_namespaced_custom_object(
            GROUP, API, self.ns, "canaries", name)
        return out

    def status(self, name: str) -> dict[str, Any]:
        return self.canary(name).get("status") or {}

    def set_template(self, name: str, template: dict[str, Any]) -> None:
        """A new release: the Deployment's pod template replaced by ``template``."""
        dep = self.cluster.apps.read_namespaced_deployment(name, self.ns).to_dict()
        replicas = dep["spec"]["replicas"]
        body = deployment(name, template, 1 if replicas is None else int(replicas))
        body["metadata"]["resourceVersion"] = dep["metadata"]["resource_version"]
        self.cluster.apps.replace_namespaced_deployment(name, self.ns, body)

    def wait_phase(self, name: str, phases: tuple[str, ...], timeout: float,
                   tail: Any = None) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            st = self.status(name)
            return st if st.get("phase") in phases else None
        try:
            return wait_for(probe, timeout, f"canary {name} in {phases}", interval=0.5,
                            tolerate=())
        except TimeoutError as e:
            raise AssertionError(f"{e}\nstatus: {json.dumps(self.status(name))}\n"
                                 f"{tail() if tail else ''}") from None
