"""Argo Rollouts on the sandbox: its CRDs from the Go module (``manifests/crds``), the cached
controller as a process watching one namespace (``--namespaced``) with the Gateway API
traffic-router plugin loaded from a local file, and the objects an Argo user writes for the same
release our rollout makes: stable and canary Services, the HTTPRoute the plugin sets weights on,
an AnalysisTemplate whose Prometheus query is our template's (our sample-count guard folded in,
the canary's pods picked by its pod-template hash), and the Rollout.

Built by ``bash sandbox/build.sh peers`` (``$IR_CACHE/bin/argo-rollouts-controller-<version>``
and ``argo-rollouts-gatewayapi-plugin-<version>``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import common  # noqa: F401  (the operator export and sandbox/ on the path)
import yaml

from inference_rollout.metrics.promql import Revision, regex_escape
from irsandbox.cluster import Cluster
from irsandbox.common import state_dir
from irsandbox.manifests import GATEWAY_PARENT

from .peer import PeerProcess, binary, install_crds, module_dir, pinned

VERSION = pinned("ARGO_ROLLOUTS_VERSION")
PLUGIN_VERSION = pinned("ARGO_GATEWAYAPI_PLUGIN_VERSION")
MODULE = f"github.com/argoproj/argo-rollouts@{VERSION}"
GROUP, API = "argoproj.io", "v1alpha1"
PLUGIN = "argoproj-labs/gatewayAPI"
#: Argo fills this from ``valueFrom.podTemplateHashValue: Latest`` (the canary's hash).
CANARY_HASH = "{{args.canary-hash}}"


def install(cluster: Cluster) -> None:
    """Rollout, AnalysisTemplate, AnalysisRun, Experiment, ClusterAnalysisTemplate."""
    install_crds(cluster, *sorted((module_dir(MODULE) / "manifests" / "crds").glob("*-crd.yaml")))


def plugin_config(namespace: str) -> dict[str, Any]:
    """``argo-rollouts-config`` in the controller's namespace (``POD_NAMESPACE``): the plugin
    from the cache, ``file://`` (the controller copies it to ``./plugin-bin`` at start)."""
    plugin = binary("argo-rollouts-gatewayapi-plugin", PLUGIN_VERSION)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "argo-rollouts-config", "namespace": namespace},
            "data": {"trafficRouterPlugins": yaml.safe_dump(
                [{"name": PLUGIN, "location": f"file://{plugin}"}])}}


class ArgoProcess(PeerProcess):
    """``rollouts-controller --namespaced`` in one namespace, no leader election; run in a
    directory of its own (it copies the plugin to ``./plugin-bin``); the plugin process it starts
    inherits ``KUBECONFIG`` (the same client identity)."""

    def __init__(self, env: dict[str, str], namespace: str) -> None:
        super().__init__(env, "argo-rollouts", namespace)
        self.workdir = state_dir() / "bench-peers" / f"argo-{namespace}"

    def command(self) -> list[str]:
        return [str(binary("argo-rollouts-controller", VERSION)),
                "--kubeconfig", self.env["KUBECONFIG"], "--namespaced",
                "--namespace", self.namespace, "--leader-elect=false",
                "--metricsPort", str(self.metrics_port),
                "--healthzPort", str(self.liveness_port), "--loglevel", "info"]

    def process_env(self) -> dict[str, str]:
        return {**super().process_env(), "POD_NAMESPACE": self.namespace}

    def start(self, cwd: Path | None = None) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        super().start(cwd or self.workdir)


class ArgoPods(Revision):
    """An Argo Rollout's pods of one ReplicaSet: ``<name>-<pod-template-hash>-<suffix>``
    (``revision`` is the hash, or :data:`CANARY_HASH` for Argo to fill in)."""

    @property
    def pod_regex(self) -> str:
        return f"{regex_escape(self.rollout)}-{self.revision}-[a-z0-9]+"


# --- what an Argo Rollouts user writes ----------------------------------------------------------


def services(name: str) -> list[dict[str, Any]]:
    """``<name>-stable`` and ``<name>-canary`` (Argo adds the pod-template hash to their
    selectors)."""
    return [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{name}-{role}"},
             "spec": {"selector": {"app": name},
                      "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}}
            for role in ("stable", "canary")]


def http_route(name: str, host: str) -> dict[str, Any]:
    """The route the plugin sets weights on: everything on stable to begin with."""
    return {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": name},
            "spec": {"parentRefs": [dict(GATEWAY_PARENT)], "hostnames": [host],
                     "rules": [{"backendRefs": [
                         {"name": f"{name}-stable", "port": 8000, "weight": 100},
                         {"name": f"{name}-canary", "port": 8000, "weight": 0}]}]}}


def analysis_template(name: str, query: str, threshold: float, interval_s: int,
                      prometheus: str) -> dict[str, Any]:
    """One metric, measured every interval, failed at the first value over ``threshold``
    (``failureLimit: 0``, as ours); an empty result (fewer samples than the guard) is an Error
    measurement, which Argo retries (``consecutiveErrorLimit``, default 4)."""
    return {"apiVersion": f"{GROUP}/{API}", "kind": "AnalysisTemplate",
            "metadata": {"name": name},
            "spec": {"args": [{"name": "canary-hash"}],
                     "metrics": [{"name": name, "interval": f"{interval_s}s", "failureLimit": 0,
                                  "successCondition": f"result[0] <= {threshold:g}",
                                  "provider": {"prometheus": {"address": prometheus,
                                                              "query": query}}}]}}


def rollout(name: str, namespace: str, template: dict[str, Any], replicas: int,
            steps: list[int], hold_s: int, progress_deadline_s: int) -> dict[str, Any]:
    """The Rollout: ``steps`` as setWeight + pause of one hold each, then 100; the analysis in
    the background from the first weight on; abort at the progress deadline; the scale-down
    delays of our sandbox rollouts (5 s after a promotion or an abort)."""
    tmpl = copy.deepcopy(template)
    tmpl["spec"].setdefault("terminationGracePeriodSeconds", 5)
    return {
        "apiVersion": f"{GROUP}/{API}", "kind": "Rollout", "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": tmpl,
            "progressDeadlineSeconds": progress_deadline_s, "progressDeadlineAbort": True,
            "strategy": {"canary": {
                "stableService": f"{name}-stable", "canaryService": f"{name}-canary",
                "trafficRouting": {"plugins": {PLUGIN: {"httpRoute": name,
                                                        "namespace": namespace}}},
                "scaleDownDelaySeconds": 5, "abortScaleDownDelaySeconds": 5,
                "steps": [x for w in steps
                          for x in ({"setWeight": w}, {"pause": {"duration": f"{hold_s}s"}})],
                "analysis": {"templates": [{"templateName": name}], "startingStep": 1,
                             "args": [{"name": "canary-hash", "valueFrom": {
                                 "podTemplateHashValue": "Latest"}}]}}}}}
