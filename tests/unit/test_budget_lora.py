"""LoRA in the memory budget and the lints (issue 31, item 2).

The buffer sizes are checked against vLLM 0.12's own shapes (``vllm/lora/layers``:
``create_lora_weights``), worked by hand for Llama-3.1-8B: per layer, one rank-R slot holds
R × (7·4096 + 2·4096 + 2·1024 + 3·14336) = R × 81,920 elements; the embeddings and LM head
R × (2·128,256 + 2·4,096).  With 4 slots of rank 64 in bfloat16: 1,342,177,280 + 135,528,448 =
1,477,705,728 bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_lint_rules import GOOD_ARGS, WATCHED

from inference_rollout.budget.args import VllmArgsError, parse_vllm_args
from inference_rollout.budget.facts import ReleaseFacts
from inference_rollout.budget.findings import Severity
from inference_rollout.budget.gpu import gpu_from_label
from inference_rollout.budget.lint import lint_release
from inference_rollout.budget.lora import LoraConfig, lora_bytes_per_gpu
from inference_rollout.budget.memory import compute_budget, estimated_hidden_size
from inference_rollout.budget.presets import get_preset

LLAMA_8B = get_preset("llama-3.1-8b")
BY_HAND = 32 * 81_920 * 4 * 64 * 2 + (2 * 128_256 + 2 * 4_096) * 4 * 64 * 2
LORA = ("--enable-lora", "--max-loras", "4", "--max-lora-rank", "64")


def lora_bytes(lora: LoraConfig, tp: int = 1, pp: int = 1, model: Any = LLAMA_8B) -> int | None:
    return lora_bytes_per_gpu(model, lora, "auto", estimated_hidden_size(model), tp, pp)


def test_the_buffers_are_vllms_shapes_for_llama_8b() -> None:
    counted = lora_bytes(LoraConfig(max_loras=4, max_lora_rank=64))
    assert counted is not None and BY_HAND == 1_477_705_728
    # the MLP width is read back from the parameter count (norms make it a hair wider)
    assert abs(counted - BY_HAND) / BY_HAND < 1e-4


def test_tensor_parallelism_shards_all_but_the_replicated_parts() -> None:
    one, two = lora_bytes(LoraConfig(4, 64)), lora_bytes(LoraConfig(4, 64), tp=2)
    assert one is not None and two is not None
    # per layer: 7H stays whole, the rest halves; embeddings and LM head stay whole
    layer_two = 7 * 4096 + (2 * 4096 + 2 * 1024 + 3 * 14336) / 2
    expected = 4 * 64 * 2 * (32 * layer_two + 2 * 128_256 + 2 * 4096)
    assert abs(two - expected) / expected < 1e-4 and two < one
    sharded = lora_bytes(LoraConfig(4, 64, fully_sharded=True), tp=2)
    assert sharded is not None and abs(two - sharded - 4 * 64 * 2 * 32 * 7 * 4096 / 2) < 1e4


def test_slots_and_rank_scale_it_and_a_float16_dtype_is_two_bytes() -> None:
    base = lora_bytes(LoraConfig(1, 16))
    assert base is not None
    assert lora_bytes(LoraConfig(2, 16)) == 2 * base
    assert lora_bytes(LoraConfig(1, 32)) == 2 * base
    assert lora_bytes(LoraConfig(1, 16, lora_dtype="float16")) == base


def test_a_mixture_of_experts_model_is_not_counted_and_says_so() -> None:
    assert lora_bytes(LoraConfig(4, 64), model=get_preset("mixtral-8x7b")) is None


def test_the_budget_takes_the_buffers_out_of_the_kv_pool() -> None:
    gpu = gpu_from_label("NVIDIA-H100-80GB-HBM3")
    args = parse_vllm_args(GOOD_ARGS)
    with_lora = parse_vllm_args((*GOOD_ARGS, *LORA))
    plain, lora = compute_budget(LLAMA_8B, args, gpu), compute_budget(LLAMA_8B, with_lora, gpu)
    taken = plain.kv_pool_bytes_per_gpu - lora.kv_pool_bytes_per_gpu
    assert abs(taken - BY_HAND) / BY_HAND < 1e-4
    note = next(f for f in lora.findings if f.code == "P2-LORA")
    assert "1.38 GiB per GPU" in note.message and note.severity is Severity.INFO


def facts(*args: str, env: dict[str, str | None] | None = None) -> ReleaseFacts:
    return ReleaseFacts(container_args=(*GOOD_ARGS, *args), gpu_memory_gib=80.0,
                        gpu_product="NVIDIA-H100-80GB-HBM3", metrics=WATCHED, slo_present=True,
                        container_env=env or {})


def findings(*args: str, env: dict[str, str | None] | None = None) -> dict[str, Any]:
    return {f.code: f for f in lint_release(facts(*args, env=env)).findings}


@pytest.mark.parametrize(("args", "flag", "words"), [
    (("--max-lora-rank", "24"), "--max-lora-rank", "24 is not one of 1, 8, 16"),
    (("--max-loras", "4", "--max-cpu-loras", "2"), "--max-cpu-loras", "at least --max-loras"),
    (("--lora-dtype", "float32"), "--lora-dtype", "'float32' is not one of"),
    (("--max-loras", "0"), "--max-loras", "at least 1"),
])
def test_flags_vllm_refuses_are_errors_naming_the_flag(args: tuple[str, ...], flag: str,
                                                        words: str) -> None:
    with pytest.raises(VllmArgsError) as refused:
        parse_vllm_args(("vllm", "serve", "m", "--enable-lora", *args))
    assert refused.value.flag == flag and words in str(refused.value)
    invalid = findings("--enable-lora", *args)["ARGS-INVALID"]
    assert invalid.is_error and f"args[{flag}]" in invalid.field


def test_lora_flags_without_enable_lora_are_named() -> None:
    found = findings("--max-loras", "4", "--lora-modules", "support=/adapters/support")
    warning = found["LORA-NOT-ENABLED"]
    assert warning.severity is Severity.WARNING and "args[--max-loras]" in warning.field
    assert "--max-loras, --lora-modules have no effect" in warning.message
    assert "P2-LORA" not in found  # nothing counted: vLLM allocates nothing


def test_more_adapters_at_start_than_the_cpu_cache_and_the_runtime_updates_switch() -> None:
    found = findings(*LORA, "--lora-modules", "a=/x", "b=/y", "c=/z", "d=/w", "e=/v")
    cache = found["LORA-CPU-CACHE"]
    assert "5 adapters" in cache.message and "keeps 4" in cache.message
    assert found["LORA-RUNTIME-UPDATES"].severity is Severity.INFO
    quiet = findings(*LORA, "--max-cpu-loras", "8", "--lora-modules", "a=/x",
                     env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"})
    assert "LORA-CPU-CACHE" not in quiet and "LORA-RUNTIME-UPDATES" not in quiet
    assert "P2-LORA" in quiet


def test_lora_modules_take_every_value_and_leave_the_model_alone() -> None:
    args = parse_vllm_args(("--model", "meta-llama/Llama-3.1-8B-Instruct", "--enable-lora",
                            "--lora-modules", "a=/x", '{"name": "b", "path": "/y"}',
                            "--max-loras", "2"))
    assert args.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert args.lora == LoraConfig(max_loras=2, static_adapters=2)
