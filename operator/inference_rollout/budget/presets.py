"""Architectures of widely used open models, for the memory budget.

Every number comes from the model's published ``config.json`` on Hugging Face (the repository in
``hf_repo``): ``num_hidden_layers`` → layers, ``num_key_value_heads`` → kv_heads, ``head_dim`` (or
``hidden_size / num_attention_heads`` where the config has no head_dim) → head_dim,
``hidden_size``, ``vocab_size``, ``max_position_embeddings`` → max_context, ``torch_dtype`` → dtype.
``parameters`` is the exact count those shapes give (embeddings, attention with its biases, MLP or
experts, norms, the LM head unless tied), which matches the safetensors total Hugging Face shows.
``embedding_parameters`` is the input embedding plus an untied LM head: weight-only quantization
(AWQ, GPTQ, FP8 checkpoints) leaves these in 16 bits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelArchitecture:
    name: str
    parameters: int
    layers: int
    kv_heads: int  # num_key_value_heads: fewer than the attention heads under GQA
    head_dim: int
    dtype: str = "bfloat16"  # the dtype vLLM serves it in under --dtype auto
    max_context: int | None = None  # max_position_embeddings: vLLM's default --max-model-len
    hidden_size: int | None = None  # None: estimated from parameters and layers
    vocab_size: int | None = None
    embedding_parameters: int = 0
    hf_repo: str | None = None

    def __post_init__(self) -> None:
        for field in ("parameters", "layers", "kv_heads", "head_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be a positive integer, got {value!r}")
        if not 0 <= self.embedding_parameters < self.parameters:
            raise ValueError("embedding_parameters must be below parameters")

    def with_overrides(self, **changes: Any) -> ModelArchitecture:
        return dataclasses.replace(self, **changes)


def _preset(name: str, hf_repo: str, *, parameters: int, layers: int, kv_heads: int,
            head_dim: int, hidden_size: int, vocab_size: int, max_context: int,
            tied_embeddings: bool = False, dtype: str = "bfloat16") -> ModelArchitecture:
    return ModelArchitecture(
        name=name, parameters=parameters, layers=layers, kv_heads=kv_heads, head_dim=head_dim,
        dtype=dtype, max_context=max_context, hidden_size=hidden_size, vocab_size=vocab_size,
        embedding_parameters=vocab_size * hidden_size * (1 if tied_embeddings else 2),
        hf_repo=hf_repo,
    )


_PRESET_LIST = (
    # Llama 2: multi-head attention (kv heads = attention heads) except 70B; float16 checkpoints.
    _preset("llama-2-7b", "meta-llama/Llama-2-7b-hf", parameters=6_738_415_616, layers=32,
            kv_heads=32, head_dim=128, hidden_size=4096, vocab_size=32000, max_context=4096,
            dtype="float16"),
    _preset("llama-2-13b", "meta-llama/Llama-2-13b-hf", parameters=13_015_864_320, layers=40,
            kv_heads=40, head_dim=128, hidden_size=5120, vocab_size=32000, max_context=4096,
            dtype="float16"),
    _preset("llama-2-70b", "meta-llama/Llama-2-70b-hf", parameters=68_976_648_192, layers=80,
            kv_heads=8, head_dim=128, hidden_size=8192, vocab_size=32000, max_context=4096,
            dtype="float16"),
    _preset("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", parameters=8_030_261_248,
            layers=32, kv_heads=8, head_dim=128, hidden_size=4096, vocab_size=128256,
            max_context=131072),
    _preset("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", parameters=70_553_706_496,
            layers=80, kv_heads=8, head_dim=128, hidden_size=8192, vocab_size=128256,
            max_context=131072),
    _preset("llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct", parameters=405_853_388_800,
            layers=126, kv_heads=8, head_dim=128, hidden_size=16384, vocab_size=128256,
            max_context=131072),
    _preset("llama-3.2-1b", "meta-llama/Llama-3.2-1B-Instruct", parameters=1_235_814_400,
            layers=16, kv_heads=8, head_dim=64, hidden_size=2048, vocab_size=128256,
            max_context=131072, tied_embeddings=True),
    _preset("llama-3.2-3b", "meta-llama/Llama-3.2-3B-Instruct", parameters=3_212_749_824,
            layers=28, kv_heads=8, head_dim=128, hidden_size=3072, vocab_size=128256,
            max_context=131072, tied_embeddings=True),
    _preset("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", parameters=70_553_706_496,
            layers=80, kv_heads=8, head_dim=128, hidden_size=8192, vocab_size=128256,
            max_context=131072),
    _preset("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3", parameters=7_248_023_552,
            layers=32, kv_heads=8, head_dim=128, hidden_size=4096, vocab_size=32768,
            max_context=32768),
    # Mixtral: 8 experts per layer, all resident in GPU memory though 2 run per token.
    _preset("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", parameters=46_702_792_704,
            layers=32, kv_heads=8, head_dim=128, hidden_size=4096, vocab_size=32000,
            max_context=32768),
    # Qwen2.5 Instruct: max_position_embeddings is 32768; 131072 needs YaRN rope scaling.
    _preset("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", parameters=7_615_616_512, layers=28,
            kv_heads=4, head_dim=128, hidden_size=3584, vocab_size=152064, max_context=32768),
    _preset("qwen2.5-14b", "Qwen/Qwen2.5-14B-Instruct", parameters=14_770_033_664, layers=48,
            kv_heads=8, head_dim=128, hidden_size=5120, vocab_size=152064, max_context=32768),
    _preset("qwen2.5-32b", "Qwen/Qwen2.5-32B-Instruct", parameters=32_763_876_352, layers=64,
            kv_heads=8, head_dim=128, hidden_size=5120, vocab_size=152064, max_context=32768),
    _preset("qwen2.5-72b", "Qwen/Qwen2.5-72B-Instruct", parameters=72_706_203_648, layers=80,
            kv_heads=8, head_dim=128, hidden_size=8192, vocab_size=152064, max_context=32768),
    # Gemma 2: head_dim is set explicitly (not hidden/heads); every other layer is a 4096-token
    # sliding window, which the budget ignores (it counts all layers at full length: an upper
    # bound).  gemma-2-9b's checkpoint is float32; vLLM serves it in bfloat16 under --dtype auto.
    _preset("gemma-2-9b", "google/gemma-2-9b-it", parameters=9_241_705_984, layers=42,
            kv_heads=8, head_dim=256, hidden_size=3584, vocab_size=256000, max_context=8192,
            tied_embeddings=True),
    _preset("gemma-2-27b", "google/gemma-2-27b-it", parameters=27_227_128_320, layers=46,
            kv_heads=16, head_dim=128, hidden_size=4608, vocab_size=256000, max_context=8192,
            tied_embeddings=True),
)

PRESETS: dict[str, ModelArchitecture] = {p.name: p for p in _PRESET_LIST}


class UnknownPresetError(KeyError):
    def __str__(self) -> str:
        return f"unknown model preset {self.args[0]!r}; known: {', '.join(PRESETS)}"


def get_preset(name: str) -> ModelArchitecture:
    try:
        return PRESETS[name.strip().lower()]
    except KeyError:
        raise UnknownPresetError(name) from None


def _normalized_model_name(model: str) -> str:
    base = model.rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    return base.removeprefix("meta-")  # Meta-Llama-3.1-8B-Instruct is Llama-3.1-8B-Instruct


def preset_for_model(model: str | None) -> ModelArchitecture | None:
    """The preset a ``--model`` name is a variant of: ``meta-llama/Llama-3.1-8B-Instruct`` and
    ``hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4`` are both ``llama-3.1-8b``."""
    if not model:
        return None
    name = _normalized_model_name(model)
    for preset in _PRESET_LIST:
        if name == preset.name or name.startswith(preset.name + "-"):
            return preset
    return None
