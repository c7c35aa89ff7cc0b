"""Manifests for the unit, sandbox and end-to-end tests, the benchmarks and the demo: one builder
per kind, plain dicts, so a test says only what is particular to its story.

:func:`inference_rollout` is the one InferenceRollout builder; :func:`sandbox_rollout` is the
preset whose pods the sandbox bridge backs with vLLM simulators (fast steps, 1 s scrapes), and
:func:`with_template` is "the same rollout, released with a changed pod template".  The other
builders are the objects the operator would create (a revision's Deployment, Service, pool) and
the HTTPRoute a user would own.  Nothing here talks to a cluster.
"""

from __future__ import annotations

import copy
from typing import Any

from .podspec import LABEL_REVISION, LABEL_ROLLOUT

ROLLOUT_API_VERSION = "rollouts.inference.dev/v1alpha1"
VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"
#: the served model name the sandbox simulators answer to and the load generator asks for
SIM_MODEL = "chat-model"
SIM_ANNOTATION = "sim.inference.dev/"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
HTTP_PORT = [{"name": "http", "containerPort": 8000}]

#: The sandbox's Gateway, served by Traefik (sandbox/up.d/65-traefik.sh); GATEWAY_URL is its
#: listener. Routes under any other parent are the nginx translator's (NGINX_GATEWAY_URL), which
#: the sandbox keeps for InferencePool backends only (docs/sandbox.md, "Gateways").
GATEWAY_PARENT = {"name": "traefik", "namespace": "gateway-system"}
#: The nginx translator's parent, for routes whose backends are InferencePools.
NGINX_PARENT = {"name": "sandbox"}

#: Short stages so a whole release takes about a minute; 1s scrapes make 5s windows meaningful.
FAST_STEPS = [{"weight": 5, "pause": "12s"}, {"weight": 20, "pause": "12s"},
              {"weight": 50, "pause": "12s"}, {"weight": 100}]


# --- InferenceRollout ----------------------------------------------------------------------------


def container(*, name: str = "vllm", image: str = VLLM_IMAGE, args: list[str] | None = None,
              gpus: int | None = None) -> dict[str, Any]:
    """A serving container on port ``http`` (8000), with a GPU limit when ``gpus`` is given."""
    out: dict[str, Any] = {"name": name, "image": image}
    if args is not None:
        out["args"] = list(args)
    out["ports"] = copy.deepcopy(HTTP_PORT)
    if gpus is not None:
        out["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return out


def inference_rollout(name: str, *, replicas: int = 2,
                      containers: list[dict[str, Any]] | None = None, app: str | None = None,
                      annotations: dict[str, str] | None = None,
                      pod: dict[str, Any] | None = None, traffic: dict[str, Any] | None = None,
                      strategy: dict[str, Any] | None = None,
                      analysis: dict[str, Any] | None = None) -> dict[str, Any]:
    """An InferenceRollout as a user writes it.  ``app`` is the pod label (default: ``name``),
    ``pod`` extra pod-spec fields (tolerations, nodeSelector), ``traffic`` defaults to an
    existing HTTPRoute named ``name``; ``strategy`` and ``analysis`` are left out when None."""
    template: dict[str, Any] = {"metadata": {"labels": {"app": app or name}}}
    if annotations is not None:
        template["metadata"]["annotations"] = dict(annotations)
    template["spec"] = {"containers": containers or [container()], **(pod or {})}
    spec: dict[str, Any] = {
        "replicas": replicas, "template": template,
        "traffic": traffic or {"gatewayAPI": {"httpRouteRef": {"name": name}}}}
    if strategy is not None:
        spec["strategy"] = strategy
    if analysis is not None:
        spec["analysis"] = analysis
    return {"apiVersion": ROLLOUT_API_VERSION, "kind": "InferenceRollout",
            "metadata": {"name": name}, "spec": spec}


def user_rollout(name: str = "llama-chat", *, replicas: int = 2,
                 args: list[str] | None = None) -> dict[str, Any]:
    """A valid rollout as a user writes it, for tests of the API and the CRD: app
    ``llama-chat`` on its existing HTTPRoute, an error-rate metric on a cluster's Prometheus."""
    return inference_rollout(
        name, replicas=replicas, app="llama-chat", containers=[container(args=args)],
        traffic={"gatewayAPI": {"httpRouteRef": {"name": "llama-chat"}}},
        analysis={"prometheus": {"address": "http://prometheus.monitoring:9090"},
                  "metrics": [{"name": "error-rate", "template": "error-rate", "max": 0.01}]})


def sandbox_rollout(name: str, *, prometheus: str, version: str = "v1", ttft_ms: int = 5,
                    failure_rate: float = 0, business_fail_rate: float = 0, gpus: int = 1,
                    replicas: int = 2, steps: list[dict[str, Any]] | None = None,
                    metrics: list[dict[str, Any]] | None = None,
                    analysis: dict[str, Any] | None = None,
                    progress_deadline: str = "60s") -> dict[str, Any]:
    """An InferenceRollout whose pods the sandbox bridge backs with vLLM simulators: a route of
    its own on the sandbox gateway, :data:`FAST_STEPS`, analysis every 5 s on 1 s scrapes
    (``analysis`` entries override those defaults, ``metrics`` the error-rate metric)."""
    annotations = {f"{SIM_ANNOTATION}ttft-ms": str(ttft_ms),
                   f"{SIM_ANNOTATION}itl-ms": "1",
                   # A short model load: Ready only once the simulator and its shim serve, so a
                   # weight raised onto a Ready pod never meets the gateway's empty upstream.
                   f"{SIM_ANNOTATION}startup-seconds": "3",
                   f"{SIM_ANNOTATION}failure-rate": f"{failure_rate:g}",
                   f"{SIM_ANNOTATION}business-fail-rate": f"{business_fail_rate:g}"}
    return inference_rollout(
        name, replicas=replicas, annotations=annotations,
        containers=[container(image=f"vllm/vllm-openai:{version}", gpus=gpus,
                              args=["--model", SIM_MODEL, "--max-num-seqs", "32"])],
        pod={"tolerations": [dict(KWOK_TOLERATION)]},
        traffic={"gatewayAPI": {"parentRefs": [dict(GATEWAY_PARENT)],
                                "hostnames": [f"{name}.test"]}},
        strategy={"steps": steps or FAST_STEPS, "progressDeadline": progress_deadline,
                  "abortScaleDownDelay": "5s", "scaleDownDelay": "5s"},
        analysis={
            # Stories on this builder test other behaviours on 12 s steps, so they keep the
            # window rule (a verdict per 5 s window).  The sequential rule, the product's
            # default, needs ~112 clean canary requests per step: it has its own stories
            # (tests/e2e/test_low_traffic.py), and the demo uses it.
            "verdicts": "Window",
            "interval": "5s",
            "prometheus": {"address": prometheus, "timeout": "3s", "scrapeInterval": "1s"},
            "minSamples": 3,
            "metrics": metrics if metrics is not None else [
                {"name": "errors", "template": "error-rate", "max": 0.01}],
            **(analysis or {}),
        })


def with_template(manifest: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The same rollout with a changed pod template (a new release): ``version`` (the image
    tag), the simulator's ``ttft_ms``, ``failure_rate``, ``business_fail_rate``, or ``gpus``."""
    m = copy.deepcopy(manifest)
    tmpl = m["spec"]["template"]
    if "version" in changes:
        tmpl["spec"]["containers"][0]["image"] = f"vllm/vllm-openai:{changes['version']}"
    for key, ann in (("ttft_ms", "ttft-ms"), ("failure_rate", "failure-rate"),
                     ("business_fail_rate", "business-fail-rate")):
        if key in changes:
            tmpl["metadata"]["annotations"][f"{SIM_ANNOTATION}{ann}"] = f"{changes[key]:g}"
    if "gpus" in changes:
        tmpl["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = changes["gpus"]
    return m


# --- what the operator creates, and a user's route -----------------------------------------------


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
                        "name": "vllm", "image": VLLM_IMAGE, "args": args,
                        "ports": copy.deepcopy(HTTP_PORT),
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                      "requests": {"nvidia.com/gpu": str(gpus)}},
                    }],
                },
            },
        },
    }


def service(name: str, rollout: str, revision: str) -> dict[str, Any]:
    """A revision's Service, as the operator creates it."""
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"selector": {LABEL_ROLLOUT: rollout, LABEL_REVISION: revision},
                 "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]},
    }


def httproute(name: str, backends: list[tuple[str, int]], hostnames: list[str] | None = None,
              kind: str = "Service", parent: str = GATEWAY_PARENT["name"],
              parent_namespace: str = GATEWAY_PARENT["namespace"]) -> dict[str, Any]:
    """An HTTPRoute with one rule, its backends by name and weight (Services on port 8000, or
    InferencePools), under Gateway ``parent`` (in ``parent_namespace``; empty: the route's);
    by default the sandbox's Gateway, which Traefik serves."""
    refs = []
    for svc, weight in backends:
        ref: dict[str, Any] = {"name": svc, "weight": weight}
        if kind == "InferencePool":
            ref.update({"group": "inference.networking.k8s.io", "kind": "InferencePool"})
        else:
            ref["port"] = 8000
        refs.append(ref)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": parent, **({"namespace": parent_namespace}
                                                     if parent_namespace else {})}],
                 "hostnames": hostnames or [], "rules": [{"backendRefs": refs}]},
    }


def inference_pool(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": selector}, "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": f"{name}-epp", "port": {"number": 9002}}},
    }
