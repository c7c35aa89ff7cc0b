"""The memory budget against hand-computed numbers, and properties that must always hold."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_rollout.budget.args import VllmArgs, parse_vllm_args
from inference_rollout.budget.dtypes import INT4_GROUP_BYTES
from inference_rollout.budget.gpu import GpuSpec
from inference_rollout.budget.memory import (
    MemoryBudget,
    compute_budget,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
)
from inference_rollout.budget.presets import ModelArchitecture, get_preset
from inference_rollout.budget.units import GIB, KIB

A100_80 = GpuSpec(80, "NVIDIA-A100-SXM4-80GB")
A100_40 = GpuSpec(40, "NVIDIA-A100-SXM4-40GB")
H100 = GpuSpec(80, "NVIDIA-H100-80GB-HBM3")
L4 = GpuSpec(24, "NVIDIA-L4")


def budget(preset: str, argv: list[str], gpu: GpuSpec) -> MemoryBudget:
    return compute_budget(get_preset(preset), parse_vllm_args(argv), gpu)


def codes(b: MemoryBudget) -> set[str]:
    return {f.code for f in b.findings}


LLAMA2_7B_ARGS = ["--max-model-len", "4096", "--max-num-seqs", "32"]


def test_llama_2_7b_kv_per_token_and_full_context() -> None:
    """The principles text says 8 GB; its own formula gives 2 GiB; the truth is 64 GiB."""
    b = budget("llama-2-7b", LLAMA2_7B_ARGS, A100_80)
    assert b.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2 == 524_288 == 512 * KIB
    assert b.full_context_kv_bytes == 32 * 4096 * 524_288 == 64 * GIB


def test_gqa_model_kv_per_token() -> None:
    """Llama 3.1 8B has 8 KV heads for 32 query heads: a quarter of Llama 2 7B's KV."""
    b = budget("llama-3.1-8b", ["--max-model-len", "8192", "--max-num-seqs", "32"], H100)
    assert b.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 128 * KIB
    assert b.full_context_kv_bytes == 32 * 8192 * 128 * KIB == 32 * GIB


def test_llama_2_7b_on_a100_80gb_by_hand() -> None:
    b = budget("llama-2-7b", LLAMA2_7B_ARGS, A100_80)
    weights = 6_738_415_616 * 2
    # 1 GiB fixed + 2048 batched tokens (A100 default) × 16 × hidden 4096 × 2 bytes
    # + 32 sequences × vocab 32000 × 4 bytes × 2 (logits and probabilities)
    temporaries = GIB + 2048 * 16 * 4096 * 2 + 32 * 32000 * 4 * 2
    pool = math.floor(0.9 * 80 * GIB - weights - temporaries)
    assert b.weight_bytes_per_gpu == weights
    assert b.temporary_bytes_per_gpu == temporaries == 1_350_369_280
    assert b.kv_pool_bytes_per_gpu == pool == 62_482_210_816
    assert b.pool_tokens == (pool // (524_288 * 16)) * 16 == 119_168
    assert b.full_length_sequences == 29  # fewer than 32: preemption
    assert b.headroom == pytest.approx(1 - (weights + temporaries + 64 * GIB) / (80 * GIB))
    assert codes(b) == {"P2-PREEMPTION", "P2-HEADROOM"}


def test_the_principles_example_does_not_fit_an_a100_40gb() -> None:
    """"Total 23.5 GB, fits on an A100 40GB": only 11 of the 32 sequences fit."""
    b = budget("llama-2-7b", LLAMA2_7B_ARGS, A100_40)
    pool = 0.9 * 40 * GIB - 6_738_415_616 * 2 - 1_350_369_280
    assert b.pool_tokens == math.floor(pool / (524_288 * 16)) * 16 == 45_440
    assert b.full_length_sequences == 11
    assert b.headroom is not None and b.headroom < 0
    assert codes(b) == {"P2-PREEMPTION", "P2-HEADROOM"}


def test_clean_budget_has_no_findings() -> None:
    b = budget("llama-3.1-8b", ["--max-model-len", "8192", "--max-num-seqs", "32"], H100)
    assert b.findings == ()
    assert b.full_length_sequences is not None and b.full_length_sequences >= 32
    assert b.headroom is not None and b.headroom > 0.2


def test_weights_that_do_not_fit_are_an_error() -> None:
    b = budget("llama-3.1-70b", ["--max-model-len", "8192"], H100)
    assert codes(b) == {"P2-WEIGHTS"}
    assert b.weight_bytes_per_gpu == 70_553_706_496 * 2
    assert b.pool_tokens == 0
    assert "--tensor-parallel-size" in b.findings[0].message


def test_pool_shorter_than_max_model_len_is_an_error() -> None:
    b = budget("llama-3.1-70b", ["-tp", "2", "--max-model-len", "131072"], H100)
    assert codes(b) == {"P2-KV-POOL"}
    assert b.weight_bytes_per_gpu == 70_553_706_496  # 2 bytes × params / 2 GPUs
    assert b.kv_bytes_per_token_per_gpu == 2 * 80 * 4 * 128 * 2
    assert 0 < b.pool_tokens < 131072
    assert f"at most {b.pool_tokens:,}" in b.findings[0].message


def test_auto_max_model_len_takes_what_fits() -> None:
    b = budget("llama-3.1-70b", ["-tp", "2", "--max-model-len", "auto"], H100)
    assert b.max_model_len == b.pool_tokens
    assert b.full_length_sequences == 1
    assert "P2-KV-POOL" not in codes(b)


@pytest.mark.parametrize(
    ("kv_heads", "tp", "heads_per_gpu"),
    [(8, 1, 8), (8, 2, 4), (8, 8, 1), (8, 16, 1), (32, 4, 8), (4, 8, 1)],
)
def test_kv_heads_split_across_tp_at_least_one(kv_heads: int, tp: int, heads_per_gpu: int) -> None:
    model = ModelArchitecture("m", 10**9, layers=10, kv_heads=kv_heads, head_dim=128)
    assert kv_bytes_per_token_per_gpu(model, 2, tp, 1) == 2 * 10 * heads_per_gpu * 128 * 2


def test_pipeline_parallel_splits_layers() -> None:
    model = ModelArchitecture("m", 10**9, layers=126, kv_heads=8, head_dim=128)
    assert kv_bytes_per_token_per_gpu(model, 2, 8, 2) == 2 * 63 * 1 * 128 * 2


@pytest.mark.parametrize(
    ("argv", "bytes_per_weight"),
    [
        (["--quantization", "fp8"], 1.0),
        (["--quantization", "awq"], INT4_GROUP_BYTES),
        (["--quantization", "gptq_marlin", "--model", "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8"], 1.0),
        (["--model", "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"], INT4_GROUP_BYTES),
    ],
)
def test_quantized_weights_keep_embeddings_in_16_bits(argv: list[str],
                                                      bytes_per_weight: float) -> None:
    preset = get_preset("llama-3.1-8b")
    b = budget("llama-3.1-8b", [*argv, "--max-model-len", "8192"], H100)
    embeddings = 2 * 128256 * 4096
    expected = (preset.parameters - embeddings) * bytes_per_weight + embeddings * 2
    assert b.weight_bytes_per_gpu == round(expected)


def test_quantization_read_from_the_name_is_noted() -> None:
    b = budget("llama-3.1-8b", ["--model", "x/Llama-3.1-8B-Instruct-AWQ", "--max-model-len",
                                "8192", "--max-num-seqs", "32"], H100)
    assert codes(b) == {"P2-QUANT-FROM-NAME"}


def test_unknown_quantization_width_is_assumed_8_bit_and_noted() -> None:
    b = budget("llama-3.1-8b", ["-q", "compressed-tensors", "--max-model-len", "8192",
                                "--max-num-seqs", "32"], H100)
    assert "P2-QUANT-ASSUMED" in codes(b)


def test_fp8_kv_cache_halves_kv_per_token() -> None:
    bf16 = budget("llama-3.1-8b", ["--max-model-len", "8192"], H100)
    fp8 = budget("llama-3.1-8b", ["--max-model-len", "8192", "--kv-cache-dtype", "fp8"], H100)
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token


def test_float32_dtype_doubles_weights() -> None:
    auto = budget("llama-3.2-1b", ["--max-model-len", "8192"], H100)
    fp32 = budget("llama-3.2-1b", ["--max-model-len", "8192", "--dtype", "float32"], H100)
    assert fp32.weight_bytes_per_gpu == 2 * auto.weight_bytes_per_gpu
    assert fp32.kv_bytes_per_token == 2 * auto.kv_bytes_per_token  # KV follows activations


@pytest.mark.parametrize(("gpu", "max_num_seqs"), [(H100, 1024), (A100_80, 256), (L4, 256)])
def test_unset_max_num_seqs_is_vllms_gpu_dependent_default(gpu: GpuSpec,
                                                           max_num_seqs: int) -> None:
    assert budget("llama-3.2-1b", ["--max-model-len", "4096"], gpu).max_num_seqs == max_num_seqs


def test_preemption_message_explains_an_unset_max_num_seqs() -> None:
    b = budget("llama-3.1-8b", ["--max-model-len", "32768"], H100)
    message = next(f.message for f in b.findings if f.code == "P2-PREEMPTION")
    assert "1024" in message and "not set" in message


def test_kv_cache_memory_bytes_sizes_the_pool() -> None:
    b = budget("llama-3.1-8b", ["--max-model-len", "8192", "--kv-cache-memory-bytes", "10G"],
               H100)
    assert b.kv_pool_bytes_per_gpu == 10 * GIB
    assert b.pool_tokens == 10 * GIB // (128 * KIB)
    too_big = budget("llama-3.1-8b", ["--max-model-len", "8192", "--kv-cache-memory-bytes",
                                      "70G"], H100)
    assert codes(too_big) == {"P2-KV-POOL"}


def test_cpu_offload_moves_weights_off_the_gpu() -> None:
    plain = budget("llama-3.1-8b", ["--max-model-len", "8192"], H100)
    offloaded = budget("llama-3.1-8b", ["--max-model-len", "8192", "--cpu-offload-gb", "4"], H100)
    assert plain.weight_bytes_per_gpu - offloaded.weight_bytes_per_gpu == 4 * GIB


def test_a_preset_draft_model_is_counted() -> None:
    target = ["--max-model-len", "8192", "--max-num-seqs", "16"]
    plain = budget("llama-3.1-70b", [*target, "-tp", "4"], H100)
    spec = budget("llama-3.1-70b", [*target, "-tp", "4", "--speculative-config",
                                    '{"model": "meta-llama/Llama-3.2-1B-Instruct", '
                                    '"num_speculative_tokens": 5}'], H100)
    assert spec.weight_bytes_per_gpu - plain.weight_bytes_per_gpu == 1_235_814_400 * 2 // 4
    assert spec.kv_bytes_per_token - plain.kv_bytes_per_token == 2 * 16 * 8 * 64 * 2


@pytest.mark.parametrize(("config", "noted"), [
    ('{"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"}', True),
    ('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}', False),
])
def test_draft_models_not_in_the_presets_are_noted(config: str, noted: bool) -> None:
    b = budget("llama-3.1-8b", ["--max-model-len", "8192", "--max-num-seqs", "16",
                                "--speculative-config", config], H100)
    assert ("P2-DRAFT-UNCOUNTED" in codes(b)) is noted


def test_max_model_len_beyond_the_model_context_is_a_warning() -> None:
    b = budget("llama-2-7b", ["--max-model-len", "8192", "--max-num-seqs", "4"], A100_80)
    assert "P2-CONTEXT-LIMIT" in codes(b)


def test_explicit_model_without_context_cannot_check_max_model_len() -> None:
    model = ModelArchitecture("custom", 7 * 10**9, layers=32, kv_heads=8, head_dim=128)
    b = compute_budget(model, VllmArgs(max_num_seqs=8), H100)
    assert b.max_model_len is None and b.full_length_sequences is None
    assert codes(b) == {"P2-NO-MAX-MODEL-LEN", "P2-HIDDEN-ESTIMATED"}


# --- properties ----------------------------------------------------------------------------------

MODELS = st.builds(
    ModelArchitecture,
    name=st.just("m"),
    parameters=st.integers(10**8, 10**12),
    layers=st.integers(1, 160),
    kv_heads=st.integers(1, 128),
    head_dim=st.sampled_from([64, 80, 96, 128, 256]),
    max_context=st.none() | st.integers(256, 1 << 20),
)
ARGS = st.builds(
    VllmArgs,
    max_model_len=st.none() | st.integers(1, 1 << 20),
    max_num_seqs=st.none() | st.integers(1, 2048),
    tensor_parallel_size=st.sampled_from([1, 2, 4, 8, 16]),
    kv_cache_dtype=st.sampled_from(["auto", "fp8"]),
    quantization=st.sampled_from([None, "awq", "fp8"]),
    gpu_memory_utilization=st.floats(0.05, 1.0),
)
GPUS = st.builds(GpuSpec, memory_gib=st.floats(1, 300))


@given(model=MODELS, element_bytes=st.sampled_from([1, 2, 4]))
def test_kv_per_token_is_linear_in_layers(model: ModelArchitecture, element_bytes: int) -> None:
    doubled = model.with_overrides(layers=2 * model.layers)
    assert kv_bytes_per_token(doubled, element_bytes) == 2 * kv_bytes_per_token(model,
                                                                                 element_bytes)


@given(model=MODELS, args=ARGS, gpu=GPUS)
def test_pool_tokens_are_whole_blocks_and_never_negative(
        model: ModelArchitecture, args: VllmArgs, gpu: GpuSpec) -> None:
    b = compute_budget(model, args, gpu)
    assert b.pool_tokens >= 0 and b.pool_tokens % 16 == 0
    assert b.pool_tokens * b.kv_bytes_per_token_per_gpu <= max(0, b.kv_pool_bytes_per_gpu)
    if b.full_length_sequences is not None and b.max_model_len:
        assert b.full_length_sequences * b.max_model_len <= b.pool_tokens


@given(model=MODELS, args=ARGS, small=st.floats(1, 150), extra=st.floats(0, 150))
def test_more_gpu_memory_never_holds_fewer_tokens(
        model: ModelArchitecture, args: VllmArgs, small: float, extra: float) -> None:
    # Same product class (vLLM's batch defaults change at 70 GiB), so compare below 70 GiB only
    # when both are below, else both above.
    large = small + extra
    if (small >= 70) != (large >= 70):
        return
    assert (compute_budget(model, args, GpuSpec(large)).pool_tokens
            >= compute_budget(model, args, GpuSpec(small)).pool_tokens)


@given(model=MODELS, args=ARGS, gpu=GPUS)
def test_more_tensor_parallelism_never_adds_weights_per_gpu(
        model: ModelArchitecture, args: VllmArgs, gpu: GpuSpec) -> None:
    wider = VllmArgs(**{**args.__dict__, "tensor_parallel_size": 2 * args.tensor_parallel_size})
    assert (compute_budget(model, wider, gpu).weight_bytes_per_gpu
            <= compute_budget(model, args, gpu).weight_bytes_per_gpu)


@given(model=MODELS, args=ARGS, gpu=GPUS)
def test_errors_mean_vllm_cannot_start(model: ModelArchitecture, args: VllmArgs,
                                       gpu: GpuSpec) -> None:
    b = compute_budget(model, args, gpu)
    whole_blocks = -(-(b.max_model_len or 0) // 16) * 16  # vLLM allocates whole blocks
    beyond_context = bool(args.max_model_len and model.max_context
                          and args.max_model_len > model.max_context)
    cannot_start = b.pool_tokens == 0 or (b.max_model_len is not None
                                          and b.pool_tokens < whole_blocks) or beyond_context
    assert any(f.is_error for f in b.findings) == cannot_start
