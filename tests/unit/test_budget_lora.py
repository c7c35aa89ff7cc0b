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
from inference_rollout.budget.facts import ReleaseFacts, facts_from_manifest
from inference_rollout.budget.findings import Severity
from inference_rollout.budget.gpu import gpu_from_label
from inference_rollout.budget.lint import lint_release
from inference_rollout.budget.lora import AdapterFact, LoraConfig, lora_bytes_per_gpu
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


def facts(*args: str, env: dict[str, str | None] | None = None,
          adapters: tuple[AdapterFact, ...] = ()) -> ReleaseFacts:
    return ReleaseFacts(container_args=(*GOOD_ARGS, *args), gpu_memory_gib=80.0,
                        gpu_product="NVIDIA-H100-80GB-HBM3", metrics=WATCHED, slo_present=True,
                        container_env=env or {}, adapters=adapters)


def findings(*args: str, env: dict[str, str | None] | None = None,
             adapters: tuple[AdapterFact, ...] = ()) -> dict[str, Any]:
    return {f.code: f for f in lint_release(facts(*args, env=env, adapters=adapters)).findings}


RUNTIME: dict[str, str | None] = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true"}
SUPPORT = AdapterFact("support", "meta-llama/Llama-3.1-8B-Instruct")


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


def test_spec_adapters_make_the_lora_switches_errors_naming_the_field() -> None:
    """Without spec.adapters these only advise; with them an adapter release could not run."""
    no_lora = findings(adapters=(SUPPORT,))["LORA-ADAPTERS-NEED-LORA"]
    assert no_lora.is_error and "args[--enable-lora]" in no_lora.field
    assert "spec.adapters names 1 adapter but" in no_lora.message
    off = findings(*LORA, adapters=(SUPPORT,))["LORA-RUNTIME-UPDATES"]
    assert off.is_error and "cannot be released at all" in off.message
    ready = findings(*LORA, env=RUNTIME, adapters=(SUPPORT,))
    assert not [f for f in ready.values() if f.code.startswith("LORA") and f.is_error], ready


def test_an_adapter_for_another_base_model_is_an_error_on_its_own_field() -> None:
    other = AdapterFact("code", "Qwen/Qwen2.5-7B-Instruct")
    found = findings(*LORA, env=RUNTIME, adapters=(SUPPORT, other))["LORA-BASE-MODEL"]
    assert found.is_error and found.field == "spec.adapters[1].baseModel"
    assert "trained on Qwen/Qwen2.5-7B-Instruct" in found.message
    assert "LORA-BASE-MODEL" not in findings(*LORA, env=RUNTIME,
                                             adapters=(AdapterFact("any", None),))


def test_spec_adapters_count_toward_the_cpu_cache_with_those_named_at_start() -> None:
    three = tuple(AdapterFact(f"a{i}", None) for i in range(3))
    cache = findings(*LORA, "--lora-modules", "x=/x", "y=/y", env=RUNTIME,
                     adapters=three)["LORA-CPU-CACHE"]
    assert "--lora-modules and spec.adapters name 5 adapters" in cache.message
    assert "Raise --max-cpu-loras to 5" in cache.message
    assert "LORA-CPU-CACHE" not in findings(*LORA, env=RUNTIME, adapters=three[:2])


def test_spec_adapters_reach_the_lints_from_a_manifest() -> None:
    manifest = {"spec": {"template": {"spec": {"containers": [{
        "name": "vllm", "image": "vllm/vllm-openai:v0.12.0", "args": [*GOOD_ARGS]}]}},
        "adapters": [{"name": "support", "source": "/a", "baseModel": "m/other"}]}}
    got = facts_from_manifest(manifest).adapters
    assert got == (AdapterFact("support", "m/other"),)
