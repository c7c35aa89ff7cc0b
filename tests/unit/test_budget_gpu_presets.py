"""GPU product labels → memory, and the model presets."""

from __future__ import annotations

from typing import Any

import pytest

from inference_rollout.budget.gpu import GpuSpec, UnknownGpuError, gpu_from_label
from inference_rollout.budget.presets import (
    PRESETS,
    ModelArchitecture,
    UnknownPresetError,
    get_preset,
    preset_for_model,
)


@pytest.mark.parametrize(
    ("label", "gib"),
    [  # memory.total as nvidia-smi / rocm-smi report it, in GiB: not the nominal GB (issue 14)
        ("NVIDIA-H100-80GB-HBM3", 79.65),
        ("NVIDIA-A100-SXM4-40GB", 40),
        ("NVIDIA-A100-80GB-PCIe", 80),
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 4.66),  # a MIG slice: its decimal GB
        ("NVIDIA-H100-NVL", 93.58),
        ("NVIDIA-H100-PCIe", 79.65),
        ("NVIDIA-H200", 140.4),
        ("NVIDIA-GH200-480GB", 95.58),  # 480GB counts the CPU's memory
        ("Tesla-T4", 15),
        ("Tesla-V100-SXM2-32GB", 32),
        ("NVIDIA-L4", 22.49),  # sold as 24 GB
        ("NVIDIA-L40S", 44.99),
        ("NVIDIA-A10G", 22.49),  # not "10G"
        ("NVIDIA-RTX-A6000", 47.99),
        ("NVIDIA-GeForce-RTX-4090", 23.99),
        ("nvidia-tesla-a100", 40),  # GKE
        ("nvidia-h100-80gb", 79.65),  # GKE
        ("a10g", 22.49),  # Karpenter
        ("AMD_Instinct_MI300X", 191.98),
        ("Acme-Accelerator-64GB", 59.6),  # unknown product: decimal GB, never more than it has
    ],
)
def test_gpu_labels(label: str, gib: float) -> None:
    assert gpu_from_label(label) == GpuSpec(gib, label)


def test_unknown_gpu_says_how_to_fix() -> None:
    with pytest.raises(UnknownGpuError, match="gpuMemoryGiB"):
        gpu_from_label("Acme-Inference-Chip")


def test_gpu_memory_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        GpuSpec(0)


def test_at_least_twelve_presets_including_the_issue_list() -> None:
    required = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
                "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b",
                "gemma-2-9b", "gemma-2-27b"}
    assert required <= set(PRESETS)
    assert len(PRESETS) >= 12


@pytest.mark.parametrize(
    ("name", "layers", "kv_heads", "head_dim", "max_context"),
    [  # from each model's config.json (num_hidden_layers, num_key_value_heads, head_dim)
        ("llama-2-7b", 32, 32, 128, 4096),
        ("llama-2-70b", 80, 8, 128, 4096),
        ("llama-3.1-8b", 32, 8, 128, 131072),
        ("llama-3.1-405b", 126, 8, 128, 131072),
        ("mixtral-8x7b", 32, 8, 128, 32768),
        ("qwen2.5-7b", 28, 4, 128, 131072),  # the base model; Instruct says 32768
            ("qwen2.5-7b-instruct", 28, 4, 128, 32768),
        ("gemma-2-9b", 42, 8, 256, 8192),  # head_dim is explicit: 3584 / 16 would be 224
        ("gemma-2-27b", 46, 16, 128, 8192),
    ],
)
def test_preset_numbers(name: str, layers: int, kv_heads: int, head_dim: int,
                        max_context: int) -> None:
    preset = get_preset(name)
    assert (preset.layers, preset.kv_heads, preset.head_dim, preset.max_context) == (
        layers, kv_heads, head_dim, max_context)


@pytest.mark.parametrize("preset", PRESETS.values(), ids=list(PRESETS))
def test_presets_are_self_consistent(preset: ModelArchitecture) -> None:
    assert preset.hidden_size and preset.vocab_size and preset.hf_repo
    # the embedding (and an untied LM head) is vocab × hidden, once or twice (gpt-oss keeps its
    # attention and router in 16 bits too: only the experts are MXFP4)
    embeddings = preset.vocab_size * preset.hidden_size
    if preset.dtype == "mxfp4":
        assert 2 * embeddings < preset.unquantized_parameters < preset.parameters / 10
    else:
        assert preset.unquantized_parameters in (embeddings, 2 * embeddings)
    assert preset.dtype in ("float16", "bfloat16", "fp8", "mxfp4")
    assert preset.attention_heads and preset.attention_heads % preset.kv_heads == 0
    assert preset.full_layers >= 1
    assert (preset.experts is None) == (preset.active_experts is None)
    assert preset_for_model(preset.hf_repo) == preset


@pytest.mark.parametrize(
    ("model", "preset"),
    [
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("meta-llama/Llama-2-70b-hf", "llama-2-70b"),  # not llama-2-7b
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b"),
        ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int8", "qwen2.5-72b-instruct"),
        ("Qwen/Qwen2.5-7B", "qwen2.5-7b"),  # the base checkpoint: 131,072 tokens of context
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", None),  # a Llama 3.1 8B, not a DeepSeek
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("/models/Mixtral-8x7B-Instruct-v0.1/", "mixtral-8x7b"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("RedHatAI/Llama-4-Maverick-17B-128E-Instruct-FP8", "llama-4-maverick-17b-128e"),
        ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b"),
        ("mistralai/Mistral-Large-Instruct-2411", None),
        (None, None),
    ],
)
def test_preset_for_model(model: str | None, preset: str | None) -> None:
    found = preset_for_model(model)
    assert (found.name if found else None) == preset


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(UnknownPresetError) as raised:
        get_preset("llama-5")
    assert "llama-3.1-8b" in str(raised.value)


@pytest.mark.parametrize("field", ["parameters", "layers", "kv_heads", "head_dim"])
def test_architecture_rejects_non_positive_numbers(field: str) -> None:
    values: dict[str, Any] = {"parameters": 10**9, "layers": 2, "kv_heads": 2, "head_dim": 64,
                              field: 0}
    with pytest.raises(ValueError, match=field):
        ModelArchitecture(name="x", **values)
