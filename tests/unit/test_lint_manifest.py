"""Reading InferenceRollout manifests into ReleaseFacts, and linting whole manifests."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference_rollout.api.spec import ModelSpec
from inference_rollout.budget.facts import (
    ManifestError,
    facts_from_manifest,
    is_inference_rollout,
    model_from_spec,
)
from inference_rollout.budget.lint import lint_manifest
from inference_rollout.budget.presets import get_preset

MANIFEST: dict[str, Any] = {
    "apiVersion": "rollouts.inference.dev/v1alpha1",
    "kind": "InferenceRollout",
    "metadata": {"name": "llama-chat", "namespace": "serving"},
    "spec": {
        "profile": "latency",
        "template": {"spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "containers": [
                {"name": "proxy", "image": "envoy", "args": ["--unrelated"]},
                {"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                 "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", 32,
                          "--max-model-len", 8192],
                 "ports": [{"name": "http", "containerPort": 8000}]},
            ],
        }},
        "model": {"preset": "llama-3.1-8b"},
        "traffic": {"gatewayAPI": {"httpRouteRef": {"name": "llama-chat"}}},
        "analysis": {
            "prometheus": {"address": "http://prometheus:9090"},
            "slo": {"ttftP99": "300ms"},
            "metrics": [{"name": "error-rate", "template": "error-rate", "max": 0.01},
                        {"name": "conversion", "query": "sum(x)", "minRatioToStable": 0.95}],
        },
        "evaluation": {"configMapRef": {"name": "eval-set"}},
    },
}


def manifest(**spec_changes: Any) -> dict[str, Any]:
    m = copy.deepcopy(MANIFEST)
    m["spec"].update(spec_changes)
    return m


def test_facts_of_a_full_manifest() -> None:
    facts = facts_from_manifest(MANIFEST, stable_container_args=("--model", "old"))
    assert facts.container_path == "spec.template.spec.containers[1]"  # the one named vllm
    assert facts.container_args == ("--model", "meta-llama/Llama-3.1-8B-Instruct",
                                    "--max-num-seqs", "32", "--max-model-len", "8192")
    assert facts.model == get_preset("llama-3.1-8b")
    assert (facts.gpu_memory_gib, facts.gpu_product) == (79.65, "NVIDIA-H100-80GB-HBM3")
    assert facts.stable_container_args == ("--model", "old")
    assert [m.name for m in facts.metrics] == ["error-rate", "conversion"]
    assert facts.metrics[1].query == "sum(x)" and facts.metrics[0].template == "error-rate"
    assert facts.slo_present and facts.evaluation_present
    assert (facts.name, facts.namespace, facts.profile) == ("llama-chat", "serving", "latency")


def test_first_container_when_none_is_named_vllm_and_command_counts() -> None:
    m = manifest()
    m["spec"]["template"]["spec"]["containers"] = [
        {"name": "server", "command": ["vllm", "serve"], "args": ["m", "--enable-x", True]}]
    facts = facts_from_manifest(m)
    assert facts.container_path == "spec.template.spec.containers[0]"
    assert facts.container_args == ("vllm", "serve", "m", "--enable-x", "true")


def test_profile_defaults_to_latency_as_in_the_api() -> None:
    m = manifest()
    del m["spec"]["profile"]
    assert facts_from_manifest(m).profile == "latency"


def test_gpu_from_required_node_affinity_takes_the_smallest() -> None:
    m = manifest()
    pod = m["spec"]["template"]["spec"]
    del pod["nodeSelector"]
    pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In",
             "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB"]}]}]}}}
    facts = facts_from_manifest(m)
    assert (facts.gpu_memory_gib, facts.gpu_product) == (40, "NVIDIA-A100-SXM4-40GB")


def test_explicit_gpu_memory_wins_over_the_label() -> None:
    facts = facts_from_manifest(manifest(model={"preset": "llama-3.1-8b", "gpuMemoryGiB": 79.2}))
    assert facts.gpu_memory_gib == 79.2


@pytest.mark.parametrize(
    ("spec_model", "expected"),
    [
        (None, None),
        ({"gpuMemoryGiB": 80}, None),
        ({"preset": "Llama-3.1-8B"}, get_preset("llama-3.1-8b")),
        ({"preset": "llama-3.1-8b", "dtype": "int4"},
         get_preset("llama-3.1-8b").with_overrides(dtype="int4")),
        ({"parametersBillions": 7.5, "layers": 32, "kvHeads": 8, "headDim": 128, "dtype": "fp8"},
         "custom"),
    ],
)
def test_model_from_spec(spec_model: dict[str, Any] | None, expected: object) -> None:
    model, _ = model_from_spec(spec_model)
    if expected == "custom":
        assert model is not None
        assert (model.parameters, model.layers, model.kv_heads, model.head_dim, model.dtype) == (
            7_500_000_000, 32, 8, 128, "fp8")
    else:
        assert model == expected


def test_the_api_model_spec_is_accepted() -> None:
    spec = ModelSpec.model_validate({"preset": "qwen2.5-7b", "gpuMemoryGiB": 24})
    assert model_from_spec(spec) == (get_preset("qwen2.5-7b"), 24)


@pytest.mark.parametrize(
    ("spec_model", "field", "words"),
    [
        ({"preset": "llama-9"}, "spec.model.preset", "known:"),
        ({"layers": 32, "kvHeads": 8}, "spec.model", "missing parametersBillions, headDim"),
        ({"preset": "llama-3.1-8b", "layers": 0}, "spec.model.layers", "positive integer"),
        ({"preset": "llama-3.1-8b", "headDim": 64.5}, "spec.model.headDim", "positive integer"),
        ({"gpuMemoryGiB": "lots"}, "spec.model.gpuMemoryGiB", "positive number"),
        ("llama", "spec.model", "must be an object"),
    ],
)
def test_bad_model_specs(spec_model: object, field: str, words: str) -> None:
    with pytest.raises(ManifestError) as raised:
        model_from_spec(spec_model)
    assert raised.value.field == field and words in raised.value.message


def test_is_inference_rollout() -> None:
    assert is_inference_rollout(MANIFEST)
    assert not is_inference_rollout({"apiVersion": "v1", "kind": "ConfigMap"})
    assert not is_inference_rollout(None)


def test_lint_a_good_manifest() -> None:
    result = lint_manifest(MANIFEST)
    assert result.findings == ()
    assert result.budget is not None


def test_schema_errors_come_from_the_api_models() -> None:
    m = manifest(strategy={"steps": [{"weight": 50}, {"weight": 20}]})
    codes_fields = [(f.code, f.field) for f in lint_manifest(m).findings]
    assert ("SPEC-INVALID", "spec.strategy") in codes_fields


def test_schema_errors_and_lints_together() -> None:
    m = manifest(profile="latency")
    del m["spec"]["traffic"]
    m["spec"]["template"]["spec"]["containers"][1]["args"] += ["--no-enable-chunked-prefill"]
    codes = [f.code for f in lint_manifest(m).findings]
    assert codes == ["SPEC-INVALID", "P1-LATENCY-CHUNKED-PREFILL"]


def test_unreadable_manifest_is_one_error() -> None:
    m = manifest(model={"preset": "llama-9"})
    findings = lint_manifest(m).findings
    assert [(f.code, f.field) for f in findings] == [("SPEC-INVALID", "spec.model.preset")]


def test_no_containers_is_reported_once() -> None:
    m = manifest()
    m["spec"]["template"]["spec"]["containers"] = []
    findings = lint_manifest(m).findings
    assert len(findings) == 1 and findings[0].code == "SPEC-INVALID"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
FUZZED_PATHS = [
    ("spec",), ("spec", "profile"), ("spec", "model"), ("spec", "model", "preset"),
    ("spec", "model", "layers"), ("spec", "template"), ("spec", "template", "spec"),
    ("spec", "template", "spec", "containers"), ("spec", "template", "spec", "containers", 1),
    ("spec", "template", "spec", "containers", 1, "args"),
    ("spec", "template", "spec", "nodeSelector"), ("spec", "template", "spec", "affinity"),
    ("spec", "analysis"), ("spec", "analysis", "metrics"), ("spec", "analysis", "slo"),
    ("metadata",),
]


@settings(max_examples=300)
@given(path=st.sampled_from(FUZZED_PATHS), value=JSON_VALUES)
def test_any_json_anywhere_gives_findings_not_exceptions(path: tuple[Any, ...],
                                                         value: object) -> None:
    m = copy.deepcopy(MANIFEST)
    node: Any = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    result = lint_manifest(m)
    assert all(f.code and f.field and f.message for f in result.findings)
