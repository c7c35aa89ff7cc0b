"""Issue 14's findings, each from the manifest that showed it, through ``lint_manifest`` (the
operator's and the CLI's path): valid releases without blocking errors, known-bad ones caught,
bad numbers as field-named errors instead of tracebacks."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from inference_rollout.api.spec import InferenceRolloutSpec
from inference_rollout.budget.lint import LintResult, lint_manifest
from inference_rollout.budget.units import GIB
from inference_rollout.cli.offline import EXIT_FINDINGS, run_budget, run_lint

BASE = yaml.safe_load("""
apiVersion: rollouts.inference.dev/v1alpha1
kind: InferenceRollout
metadata: {name: chat, namespace: serving}
spec:
  template:
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.11.0
        args: [--model, meta-llama/Llama-3.1-8B-Instruct, --max-num-seqs, "16",
               --max-model-len, "8192"]
        ports: [{name: http, containerPort: 8000}]
  model: {gpuMemoryGiB: 80}
  traffic: {gatewayAPI: {httpRouteRef: {name: chat}}}
  analysis:
    prometheus: {address: "http://prometheus:9090"}
    slo: {ttftP99: 300ms}
    metrics: [{name: error-rate, template: error-rate, max: 0.01}]
""")


def rollout(args: list[str] | None = None, env: list[dict[str, Any]] | None = None,
            **model: Any) -> dict[str, Any]:
    m = copy.deepcopy(BASE)
    container = m["spec"]["template"]["spec"]["containers"][0]
    if args is not None:
        container["args"] = args
    if env is not None:
        container["env"] = env
    m["spec"]["model"].update(model)
    return m


def llama(*extra: str, max_len: str = "8192") -> list[str]:
    return ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "16",
            "--max-model-len", max_len, *extra]


def codes(result: LintResult, severity: str | None = None) -> list[str]:
    return [f.code for f in result.findings if severity is None or f.severity == severity]


def errors(result: LintResult) -> list[str]:
    return codes(result, "error")


# --- valid releases that got blocking errors -----------------------------------------------------


def test_kubernetes_variable_from_a_literal_env_value_is_expanded() -> None:
    result = lint_manifest(rollout(llama(max_len="$(MAX_LEN)"),
                                   env=[{"name": "MAX_LEN", "value": "4096"}]))
    assert errors(result) == []
    assert result.budget is not None and result.budget.max_model_len == 4096


def test_kubernetes_variable_from_a_secret_is_not_an_error() -> None:
    env = [{"name": "MAX_LEN", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
    result = lint_manifest(rollout(llama(max_len="$(MAX_LEN)"), env=env))
    assert errors(result) == []
    (unresolved,) = [f for f in result.findings if f.code == "ARGS-UNRESOLVED"]
    assert unresolved.field.endswith("args[--max-model-len]") and "MAX_LEN" in unresolved.message


def test_an_undefined_variable_reaches_vllm_as_written_so_it_is_an_error() -> None:
    result = lint_manifest(rollout(llama(max_len="$(MAX_LEN)")))
    (invalid,) = [f for f in result.findings if f.code == "ARGS-INVALID"]
    assert invalid.is_error and "not defined in the container's env" in invalid.message


@pytest.mark.parametrize("env_value", [{"value": "4096"}, {"valueFrom": {"secretKeyRef": {}}}])
def test_shell_variables_in_sh_c_are_expanded_from_env(env_value: dict[str, Any]) -> None:
    script = ["sh", "-c", "exec vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 16 "
              "--max-model-len ${MAX_LEN}"]
    result = lint_manifest(rollout(script, env=[{"name": "MAX_LEN", **env_value}]))
    assert errors(result) == []
    if "value" in env_value:
        assert result.budget is not None and result.budget.max_model_len == 4096
    else:
        assert "ARGS-UNRESOLVED" in codes(result)


def test_escaped_variable_is_literal() -> None:
    result = lint_manifest(rollout(llama(max_len="$$(MAX_LEN)"),
                                   env=[{"name": "MAX_LEN", "value": "4096"}]))
    assert errors(result) == ["ARGS-INVALID"]  # vLLM receives "$(MAX_LEN)"


@pytest.mark.parametrize(
    ("release", "stable"),
    [
        (llama("--kv-cache-dtype", "bfloat16"), llama()),  # auto is bfloat16 on a bf16 model
        (llama(), ["--model", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4",
                   "--max-model-len", "8192"]),  # de-quantizing loses nothing
    ],
)
def test_no_quantization_gate_without_a_loss_of_precision(release: list[str],
                                                          stable: list[str]) -> None:
    result = lint_manifest(rollout(release), stable_container_args=tuple(stable))
    assert "P11-QUANT-GATE" not in codes(result)
    assert errors(result) == []


# --- known-bad configurations that passed --------------------------------------------------------


def test_qwen25_base_takes_its_own_131k_context() -> None:
    # vLLM's default --max-model-len is the base config's 131,072: 7 GiB of KV on an L4
    args = ["--model", "Qwen/Qwen2.5-7B", "--max-num-seqs", "16"]
    result = lint_manifest(rollout(args, gpuMemoryGiB=22.5))
    assert errors(result) == ["P2-KV-POOL"]
    assert result.budget is not None and result.budget.max_model_len == 131072
    instruct = lint_manifest(rollout(["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs",
                                      "16"], gpuMemoryGiB=22.5))
    assert instruct.budget is not None and instruct.budget.max_model_len == 32768


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (llama("-tp", "3"), "32 attention heads and 8 KV heads"),
        (["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192", "-tp", "8"],
         "28 attention heads"),
    ],
)
def test_tensor_parallelism_must_divide_the_heads(args: list[str], words: str) -> None:
    result = lint_manifest(rollout(args))
    (tp,) = [f for f in result.findings if f.code == "P2-TP-HEADS"]
    assert tp.is_error and words in tp.message
    assert tp.field == "spec.template.spec.containers[0].args[--tensor-parallel-size]"
    assert "P2-TP-HEADS" not in codes(lint_manifest(rollout(llama("-tp", "4"))))


def test_fp16_is_not_a_vllm_kv_cache_dtype() -> None:
    result = lint_manifest(rollout(llama("--kv-cache-dtype", "fp16")))
    assert errors(result) == ["ARGS-INVALID"]
    assert "'fp16' is not one of" in result.findings[0].message


def test_max_model_len_beyond_the_context_needs_the_env_switch() -> None:
    too_long = llama(max_len="200000")
    assert "P2-CONTEXT-LIMIT" in errors(lint_manifest(rollout(too_long, gpuMemoryGiB=141)))
    allowed = lint_manifest(rollout(too_long, gpuMemoryGiB=141, env=[
        {"name": "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "value": "1"}]))
    assert "P2-CONTEXT-LIMIT" in codes(allowed, "warning") and errors(allowed) == []


def test_int4_dtype_keeps_embeddings_and_lm_head_16_bit() -> None:
    # the same weights as the --quantization awq path: 5.33 GiB, not 3.89
    dtype = lint_manifest(rollout(preset="llama-3.1-8b", dtype="int4")).budget
    awq = lint_manifest(rollout(llama("--quantization", "awq"))).budget
    assert dtype is not None and awq is not None
    assert dtype.weight_bytes_per_gpu == awq.weight_bytes_per_gpu
    assert round(dtype.weight_bytes_per_gpu / GIB, 2) == 5.33


# --- the 2026 architectures ----------------------------------------------------------------------


def test_gemma3_at_131k_fits_as_vllms_hybrid_allocator_lays_it_out() -> None:
    args = ["--model", "google/gemma-3-27b-it", "--max-num-seqs", "1"]
    result = lint_manifest(rollout(args))
    assert errors(result) == []
    b = result.budget
    assert b is not None and b.max_model_len == 131072 and b.full_length_sequences == 1
    # 10 global layers hold all 131,072 tokens (8192 blocks), 52 local ones 1023 + 8192 batched
    # tokens (576 blocks) + one block
    page = 16 * 2 * 16 * 128 * 2
    assert b.sequence_kv_bytes_per_gpu == (10 * 8192 + 52 * (576 + 1)) * page
    # with the hybrid manager off, every layer is full and vLLM refuses to start
    off = lint_manifest(rollout([*args, "--disable-hybrid-kv-cache-manager"]))
    assert errors(off) == ["P2-KV-POOL"]


def test_deepseek_caches_the_mla_latent_not_128_kv_heads() -> None:
    args = ["--model", "deepseek-ai/DeepSeek-R1", "-tp", "8", "--max-model-len", "32768",
            "--max-num-seqs", "16"]
    b = lint_manifest(rollout(args, gpuMemoryGiB=141)).budget
    assert b is not None
    assert b.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert b.kv_bytes_per_token_per_gpu == 70_272  # the latent is on every TP rank
    naive = 2 * 61 * 128 * (128 + 64) * 2  # num_key_value_heads 128 × qk head dim 192
    assert 85 < naive / b.kv_bytes_per_token < 86


# --- bad numbers: field-named errors, never a traceback -----------------------------------------


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ({"gpuMemoryGiB": float("inf")}, "spec.model.gpuMemoryGiB"),
        ({"gpuMemoryGiB": float("nan")}, "spec.model.gpuMemoryGiB"),
        ({"gpuMemoryGiB": -80}, "spec.model.gpuMemoryGiB"),
        ({"preset": "llama-3.1-8b", "parametersBillions": float("inf")},
         "spec.model.parametersBillions"),
        ({"preset": "llama-3.1-8b", "layers": float("inf")}, "spec.model.layers"),
    ],
)
def test_infinite_nan_and_negative_model_numbers_are_field_errors(model: dict[str, Any],
                                                                   field: str) -> None:
    result = lint_manifest(rollout(**model))
    assert result.has_errors and result.budget is None
    assert field in [f.field for f in result.findings if f.is_error]


@pytest.mark.parametrize("offload", ["nan", "inf", "-5"])
def test_cpu_offload_must_be_a_finite_non_negative_number(offload: str) -> None:
    result = lint_manifest(rollout(llama("--cpu-offload-gb", offload)))
    (invalid,) = [f for f in result.findings if f.is_error]
    assert invalid.code == "ARGS-INVALID" and invalid.field.endswith("args[--cpu-offload-gb]")


@pytest.mark.parametrize(
    ("value", "words"),
    [("50", "integer"), (True, "integer"), (50.0, "integer"), (2**64, "64 bits")],
)
def test_offline_lint_rejects_what_the_api_server_rejects(value: object, words: str) -> None:
    m = rollout()
    m["spec"]["replicas"] = value
    result = lint_manifest(m)
    (invalid,) = [f for f in result.findings if f.field == "spec.replicas"]
    assert invalid.code == "SPEC-INVALID" and words in invalid.message


def test_an_empty_helm_port_is_a_field_error_in_lint_and_budget(tmp_path: Path) -> None:
    m = rollout()
    m["spec"]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "http", "containerPort": None}]
    path = tmp_path / "null-port.yaml"
    path.write_text(yaml.safe_dump(m))
    out = io.StringIO()
    assert run_lint([str(path)], "json", [], out=out) == EXIT_FINDINGS
    (finding,) = json.loads(out.getvalue())["rollouts"][0]["findings"]
    assert finding["code"] == "SPEC-INVALID" and "containerPort" in finding["message"]
    out = io.StringIO()
    assert run_budget(str(path), "json", out=out) == EXIT_FINDINGS
    assert json.loads(out.getvalue())["findings"][0]["code"] == "SPEC-INVALID"


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e6])
def test_the_operators_model_rejects_unbounded_gpu_memory_naming_the_field(value: float) -> None:
    # the reconcile parses specs with the same models: a ValidationError there is Valid=False
    with pytest.raises(ValidationError) as caught:
        InferenceRolloutSpec.parse(rollout(gpuMemoryGiB=value)["spec"])
    assert [e["loc"] for e in caught.value.errors()] == [("model", "gpuMemoryGiB")]
