"""The example manifests (examples/*.yaml, deploy/kind/) against the operator's own models and
lints, offline. tests/sandbox/test_delivery_manifests.py applies the same files to a real API
server (server-side dry-run), which checks them against the CRD's schema and CEL rules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_rollout import api
from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.budget import lint_manifest
from inference_rollout.metrics.promql import PLACEHOLDERS
from irsandbox.podspec import sanitize_label_name

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))  # not examples/budget/: its own tests
KIND = ROOT / "deploy" / "kind"
KIND_ROLLOUTS = sorted(KIND.glob("rollout*.yaml"))
EXPECTED = {"latency-chat.yaml", "throughput-70b-tp4.yaml", "owned-route.yaml",
            "inferencepool-backend.yaml", "business-metric.yaml", "gateway-view.yaml",
            "sessions-and-testers.yaml", "probes.yaml", "lora-adapters.yaml"}


def rollouts(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    out = [d for d in docs if d.get("kind") == "InferenceRollout"]
    assert out, f"{path.name}: no InferenceRollout"
    return out


def spec_of(path: Path) -> InferenceRolloutSpec:
    (doc,) = rollouts(path)
    assert doc["apiVersion"] == "rollouts.inference.dev/v1alpha1"
    return InferenceRolloutSpec.parse(doc["spec"])


def test_every_promised_example_exists() -> None:
    assert {p.name for p in EXAMPLES} == EXPECTED


@pytest.mark.parametrize("path", EXAMPLES + KIND_ROLLOUTS, ids=lambda p: p.name)
def test_example_parses_with_the_operators_models(path: Path) -> None:
    spec_of(path)


@pytest.mark.parametrize("path", EXAMPLES + KIND_ROLLOUTS, ids=lambda p: p.name)
def test_example_passes_lint_without_errors_or_warnings(path: Path) -> None:
    # The examples are what users copy: each must be clean under `kubectl inference-rollout lint`
    # (the memory budget, batch and quantization rules), not merely valid.
    (doc,) = rollouts(path)
    result = lint_manifest(doc)
    noisy = [f for f in result.findings if f.severity in ("error", "warning")]
    assert not noisy, "\n".join(f"{f.severity} {f.code}: {f.message}" for f in noisy)


def test_latency_chat_is_one_gpu_with_ttft_and_itl_slos() -> None:
    spec = spec_of(ROOT / "examples" / "latency-chat.yaml")
    assert spec.profile == "latency"
    assert spec.template.serving_container()["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert spec.analysis.slo is not None
    assert spec.analysis.slo.ttft_p99 and spec.analysis.slo.itl_p99
    assert spec.traffic.gateway_api.http_route_ref is not None
    # the route it names is in the same file
    routes = [d for d in yaml.safe_load_all((ROOT / "examples" / "latency-chat.yaml").read_text())
              if d and d["kind"] == "HTTPRoute"]
    assert [r["metadata"]["name"] for r in routes] == [spec.traffic.gateway_api.http_route_ref.name]


def test_throughput_70b_uses_tensor_parallel_4() -> None:
    spec = spec_of(ROOT / "examples" / "throughput-70b-tp4.yaml")
    assert spec.profile == "throughput"
    args = spec.template.serving_args()
    assert "meta-llama/Llama-3.1-70B-Instruct" in args
    assert args[args.index("--tensor-parallel-size") + 1] == "4"
    assert spec.template.serving_container()["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_owned_route_and_inferencepool_modes() -> None:
    owned = spec_of(ROOT / "examples" / "owned-route.yaml").traffic.gateway_api
    assert owned.http_route_ref is None and owned.parent_refs
    pool = spec_of(ROOT / "examples" / "inferencepool-backend.yaml").traffic.gateway_api
    assert pool.backend_kind == "InferencePool"
    assert pool.endpoint_picker_ref is not None
    assert pool.endpoint_picker_ref.for_pool("llama-pool-abc")["name"] == "llama-pool-abc-epp"


def test_gateway_view_waits_for_the_gateway_and_reads_its_counters() -> None:
    spec = spec_of(ROOT / "examples" / "gateway-view.yaml")
    assert spec.traffic.gateway_api.route_status == "Required"
    by_template = {m.template: m for m in spec.analysis.metrics}
    assert by_template["gateway-error-rate"].gateway == "traefik"
    share = by_template["gateway-traffic-share"]
    assert share.max == 2 and share.min_samples == 2000


def test_business_metric_uses_placeholders_and_a_relative_threshold() -> None:
    spec = spec_of(ROOT / "examples" / "business-metric.yaml")
    (custom,) = [m for m in spec.analysis.metrics if m.query]
    assert custom.min_ratio_to_stable == 0.95
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", custom.query or ""))
    assert used == {"namespace", "revision", "window"}
    assert used <= set(PLACEHOLDERS)


def test_business_metric_satisfies_the_quantization_gate() -> None:
    # Principle 11: moving from bf16 weights to AWQ is a quantization change; the release is
    # accepted because it carries a business metric compared with stable.
    (doc,) = rollouts(ROOT / "examples" / "business-metric.yaml")
    stable = ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "16")
    result = lint_manifest(doc, stable_container_args=stable)
    assert not [f for f in result.findings if f.is_error], result.findings
    without = {**doc, "spec": {**doc["spec"], "analysis": {
        **doc["spec"]["analysis"],
        "metrics": [m for m in doc["spec"]["analysis"]["metrics"] if "query" not in m]}}}
    assert [f for f in lint_manifest(without, stable_container_args=stable).findings
            if f.is_error], "the gate must fire without the business metric"


def test_kind_rollouts_run_the_pinned_simulator() -> None:
    versions = dict(line.split("=", 1) for line in
                    (ROOT / "sandbox" / "versions.env").read_text().splitlines()
                    if "=" in line and not line.startswith("#"))
    want = f"ghcr.io/llm-d/llm-d-inference-sim:{versions['LLM_D_INFERENCE_SIM_VERSION']}"
    for path in KIND_ROLLOUTS:
        assert spec_of(path).template.serving_container()["image"] == want, path.name


def test_kind_releases_differ_only_in_the_template() -> None:
    # v2 and v3 are new releases of the same rollout: only spec.template may change.
    (base,) = rollouts(KIND / "rollout.yaml")
    for name in ("rollout-v2.yaml", "rollout-v3-slow.yaml"):
        (doc,) = rollouts(KIND / name)
        assert doc["metadata"] == base["metadata"]
        assert {k: v for k, v in doc["spec"].items() if k != "template"} == \
            {k: v for k, v in base["spec"].items() if k != "template"}
        assert doc["spec"]["template"] != base["spec"]["template"]


def test_kind_up_names_every_kind_manifest() -> None:
    # The script applies each file (v2/v3 are printed for the user to apply), and
    # tests/sandbox/test_delivery_manifests.py dry-runs every file in deploy/kind/.
    script = (ROOT / "hack" / "kind-up.sh").read_text()
    named = set(re.findall(r"-f (deploy/kind/[\w.-]+\.yaml)", script))
    assert named == {f"deploy/kind/{p.name}" for p in KIND.glob("*.yaml")}


def test_autoscaling_examples_target_the_rollout_by_its_scale_subresource() -> None:
    """The HPA and the ScaledObject name the CRD's kind, select the rollout's pods by the label
    Prometheus stores, and the HPA asks for the metric the adapter rule serves."""
    folder = ROOT / "examples" / "autoscaling"
    (hpa,) = yaml.safe_load_all((folder / "hpa-external.yaml").read_text())
    (keda,) = yaml.safe_load_all((folder / "keda-scaledobject.yaml").read_text())
    rules = yaml.safe_load((folder / "prometheus-adapter-rules.yaml").read_text())
    label = sanitize_label_name(api.LABEL_ROLLOUT)
    for target in (hpa["spec"]["scaleTargetRef"], keda["spec"]["scaleTargetRef"]):
        assert (target["apiVersion"], target["kind"]) == (api.API_VERSION, api.KIND)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == rules["externalRules"][0]["name"]["as"]
    assert metric["external"]["metric"]["selector"]["matchLabels"] == {
        label: hpa["spec"]["scaleTargetRef"]["name"]}
    (trigger,) = keda["spec"]["triggers"]
    assert f'{label}="{keda["spec"]["scaleTargetRef"]["name"]}"' in trigger["metadata"]["query"]
    assert "vllm:num_requests_waiting" in trigger["metadata"]["query"]
