"""Architectures of widely used open models, for the memory budget.

Every number comes from the model's published ``config.json`` on Hugging Face (the repository in
``hf_repo``): ``num_hidden_layers`` → layers, ``num_key_value_heads`` → kv_heads, ``head_dim`` (or
``hidden_size / num_attention_heads`` where the config has no head_dim) → head_dim,
``hidden_size``, ``vocab_size``, ``max_position_embeddings`` → max_context, ``torch_dtype`` → dtype
(or the checkpoint's ``quantization_config``: fp8 for DeepSeek-V3, mxfp4 for gpt-oss),
``num_attention_heads`` → attention_heads, ``kv_lora_rank`` / ``qk_rope_head_dim`` (MLA),
``sliding_window`` with ``layer_types`` / ``sliding_window_pattern`` or ``attention_chunk_size``
with ``no_rope_layers`` → the local layers and their window, ``n_routed_experts`` /
``num_local_experts`` / ``num_experts`` and ``num_experts_per_tok`` → experts and active experts.
``parameters`` is the exact count those shapes give (embeddings, attention with its biases, MLP or
every expert, norms, the LM head unless tied, a vision tower where there is one), which matches
the safetensors total Hugging Face shows.  ``unquantized_parameters`` is what a quantized
checkpoint keeps in 16 bits: the input embedding plus an untied LM head (AWQ, GPTQ, FP8), and for
gpt-oss everything but the MXFP4 experts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

LOCAL_KINDS = ("slidingWindow", "chunked")


@dataclass(frozen=True)
class ModelArchitecture:
    name: str
    parameters: int  # all of them, every expert included: all are resident in GPU memory
    layers: int
    kv_heads: int  # num_key_value_heads: fewer than the attention heads under GQA
    head_dim: int
    dtype: str = "bfloat16"  # the dtype the weights are stored in (fp8 / mxfp4: pre-quantized)
    max_context: int | None = None  # max_position_embeddings: vLLM's default --max-model-len
    hidden_size: int | None = None  # None: estimated from parameters and layers
    vocab_size: int | None = None
    # Parameters a quantized checkpoint keeps in 16 bits: the embeddings and an untied LM head
    # (AWQ, GPTQ, FP8), and for gpt-oss everything but the experts (MXFP4 experts only).
    unquantized_parameters: int = 0
    hf_repo: str | None = None
    attention_heads: int | None = None  # num_attention_heads: tensor parallelism must divide it
    # MLA (DeepSeek V2/V3): vLLM caches one compressed latent per layer and token instead of K
    # and V per head: kv_lora_rank + qk_rope_head_dim elements, the same on every TP rank.
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    # Layers that attend to a window only (Gemma 3's local layers, gpt-oss's sliding layers,
    # Llama 4's chunked layers); the others attend to the whole sequence.
    local_layers: int = 0
    local_kind: str | None = None  # one of LOCAL_KINDS
    local_window: int | None = None  # sliding_window or attention_chunk_size, in tokens
    experts: int | None = None  # routed experts per MoE layer (all resident)
    active_experts: int | None = None  # experts each token runs through (compute, not memory)

    def __post_init__(self) -> None:
        for field in ("parameters", "layers", "kv_heads", "head_dim"):
            _require_positive(field, getattr(self, field))
        for field in ("attention_heads", "kv_lora_rank", "local_window", "experts",
                      "active_experts", "max_context", "hidden_size", "vocab_size"):
            if getattr(self, field) is not None:
                _require_positive(field, getattr(self, field))
        if not 0 <= self.unquantized_parameters < self.parameters:
            raise ValueError("unquantized_parameters must be below parameters")
        if not 0 <= self.local_layers <= self.layers:
            raise ValueError(f"local attention layers ({self.local_layers}) must be between 0 "
                             f"and the model's layers ({self.layers})")
        if self.local_layers and (self.local_kind not in LOCAL_KINDS or not self.local_window):
            raise ValueError("local attention layers need a kind (slidingWindow or chunked) and "
                             "a window")
        if self.experts and self.active_experts and self.active_experts > self.experts:
            raise ValueError(f"active experts ({self.active_experts}) exceed the experts "
                             f"({self.experts})")

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def full_layers(self) -> int:
        return self.layers - self.local_layers

    def with_overrides(self, **changes: Any) -> ModelArchitecture:
        return dataclasses.replace(self, **changes)


def _require_positive(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field} must be a positive integer, got {value!r}")


def _preset(name: str, hf_repo: str, *, parameters: int, layers: int, kv_heads: int,
            head_dim: int, hidden_size: int, vocab_size: int, max_context: int,
            attention_heads: int, tied_embeddings: bool = False, dtype: str = "bfloat16",
            unquantized_parameters: int | None = None, **shape: Any) -> ModelArchitecture:
    embeddings = vocab_size * hidden_size * (1 if tied_embeddings else 2)
    return ModelArchitecture(
        name=name, parameters=parameters, layers=layers, kv_heads=kv_heads, head_dim=head_dim,
        dtype=dtype, max_context=max_context, hidden_size=hidden_size, vocab_size=vocab_size,
        unquantized_parameters=embeddings if unquantized_parameters is None
        else unquantized_parameters,
        hf_repo=hf_repo, attention_heads=attention_heads, **shape,
    )


_LLAMA3_VOCAB = 128256
_QWEN2_VOCAB = 152064
_QWEN3_VOCAB = 151936

_PRESET_LIST = (
    # Llama 2: multi-head attention (kv heads = attention heads) except 70B; float16 checkpoints.
    _preset("llama-2-7b", "meta-llama/Llama-2-7b-hf", parameters=6_738_415_616, layers=32,
            attention_heads=32, kv_heads=32, head_dim=128, hidden_size=4096, vocab_size=32000,
            max_context=4096, dtype="float16"),
    _preset("llama-2-13b", "meta-llama/Llama-2-13b-hf", parameters=13_015_864_320, layers=40,
            attention_heads=40, kv_heads=40, head_dim=128, hidden_size=5120, vocab_size=32000,
            max_context=4096, dtype="float16"),
    _preset("llama-2-70b", "meta-llama/Llama-2-70b-hf", parameters=68_976_648_192, layers=80,
            attention_heads=64, kv_heads=8, head_dim=128, hidden_size=8192, vocab_size=32000,
            max_context=4096, dtype="float16"),
    _preset("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", parameters=8_030_261_248,
            layers=32, attention_heads=32, kv_heads=8, head_dim=128, hidden_size=4096,
            vocab_size=_LLAMA3_VOCAB, max_context=131072),
    _preset("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", parameters=70_553_706_496,
            layers=80, attention_heads=64, kv_heads=8, head_dim=128, hidden_size=8192,
            vocab_size=_LLAMA3_VOCAB, max_context=131072),
    _preset("llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct", parameters=405_853_388_800,
            layers=126, attention_heads=128, kv_heads=8, head_dim=128, hidden_size=16384,
            vocab_size=_LLAMA3_VOCAB, max_context=131072),
    _preset("llama-3.2-1b", "meta-llama/Llama-3.2-1B-Instruct", parameters=1_235_814_400,
            layers=16, attention_heads=32, kv_heads=8, head_dim=64, hidden_size=2048,
            vocab_size=_LLAMA3_VOCAB, max_context=131072, tied_embeddings=True),
    _preset("llama-3.2-3b", "meta-llama/Llama-3.2-3B-Instruct", parameters=3_212_749_824,
            layers=28, attention_heads=24, kv_heads=8, head_dim=128, hidden_size=3072,
            vocab_size=_LLAMA3_VOCAB, max_context=131072, tied_embeddings=True),
    _preset("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", parameters=70_553_706_496,
            layers=80, attention_heads=64, kv_heads=8, head_dim=128, hidden_size=8192,
            vocab_size=_LLAMA3_VOCAB, max_context=131072),
    _preset("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3", parameters=7_248_023_552,
            layers=32, attention_heads=32, kv_heads=8, head_dim=128, hidden_size=4096,
            vocab_size=32768, max_context=32768),
    # Mixtral: 8 experts per layer, all resident in GPU memory though 2 run per token.
    _preset("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", parameters=46_702_792_704,
            layers=32, attention_heads=32, kv_heads=8, head_dim=128, hidden_size=4096,
            vocab_size=32000, max_context=32768, experts=8, active_experts=2),
    # Qwen2.5: the base checkpoints' max_position_embeddings is 131072, the Instruct ones' 32768
    # (131072 needs YaRN rope scaling), so they are separate presets.
    *(_preset(f"qwen2.5-{size}{suffix}", f"Qwen/Qwen2.5-{size.upper()}{repo_suffix}",
              parameters=parameters, layers=layers, attention_heads=heads, kv_heads=kv_heads,
              head_dim=128, hidden_size=hidden, vocab_size=_QWEN2_VOCAB, max_context=context)
      for suffix, repo_suffix, context in (("", "", 131072), ("-instruct", "-Instruct", 32768))
      for size, parameters, layers, heads, kv_heads, hidden in (
          ("7b", 7_615_616_512, 28, 28, 4, 3584),
          ("14b", 14_770_033_664, 48, 40, 8, 5120),
          ("32b", 32_763_876_352, 64, 40, 8, 5120),
          ("72b", 72_706_203_648, 80, 64, 8, 8192))),
    # Gemma 2: head_dim is set explicitly (not hidden/heads); every other layer is a 4096-token
    # sliding window.  gemma-2-9b's checkpoint is float32; vLLM serves it in bfloat16.
    _preset("gemma-2-9b", "google/gemma-2-9b-it", parameters=9_241_705_984, layers=42,
            attention_heads=16, kv_heads=8, head_dim=256, hidden_size=3584, vocab_size=256000,
            max_context=8192, tied_embeddings=True, local_layers=21, local_kind="slidingWindow",
            local_window=4096),
    _preset("gemma-2-27b", "google/gemma-2-27b-it", parameters=27_227_128_320, layers=46,
            attention_heads=32, kv_heads=16, head_dim=128, hidden_size=4608, vocab_size=256000,
            max_context=8192, tied_embeddings=True, local_layers=23, local_kind="slidingWindow",
            local_window=4096),
    # --- 2025-2026 families (docs/budget.md has the hand-computed budgets) ----------------------
    # Qwen3: q/k norms, no attention bias; the MoE models route each token to 8 of 128 experts.
    _preset("qwen3-8b", "Qwen/Qwen3-8B", parameters=8_190_735_360, layers=36, attention_heads=32,
            kv_heads=8, head_dim=128, hidden_size=4096, vocab_size=_QWEN3_VOCAB,
            max_context=40960),
    _preset("qwen3-32b", "Qwen/Qwen3-32B", parameters=32_762_123_264, layers=64,
            attention_heads=64, kv_heads=8, head_dim=128, hidden_size=5120,
            vocab_size=_QWEN3_VOCAB, max_context=40960),
    _preset("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", parameters=30_532_122_624, layers=48,
            attention_heads=32, kv_heads=4, head_dim=128, hidden_size=2048,
            vocab_size=_QWEN3_VOCAB, max_context=40960, experts=128, active_experts=8),
    _preset("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", parameters=235_093_634_560, layers=94,
            attention_heads=64, kv_heads=4, head_dim=128, hidden_size=4096,
            vocab_size=_QWEN3_VOCAB, max_context=40960, experts=128, active_experts=8),
    # DeepSeek-V3 / R1: MLA (config's num_key_value_heads 128 is not what vLLM caches: it caches
    # kv_lora_rank 512 + qk_rope_head_dim 64 per layer), 256 routed experts (8 active) + 1
    # shared, an FP8 checkpoint (embeddings and LM head in bf16).  parameters excludes the 14 B
    # multi-token-prediction layer, which vLLM loads only for MTP speculation.
    *(_preset(name, repo, parameters=671_026_419_200, layers=61, attention_heads=128,
              kv_heads=1, head_dim=576, hidden_size=7168, vocab_size=129280,
              max_context=163840, dtype="fp8", kv_lora_rank=512, qk_rope_head_dim=64,
              experts=256, active_experts=8)
      for name, repo in (("deepseek-v3", "deepseek-ai/DeepSeek-V3"),
                         ("deepseek-r1", "deepseek-ai/DeepSeek-R1"))),
    # gpt-oss: layers alternate a 128-token sliding window and full attention; the experts are
    # MXFP4 in the checkpoint, everything else (attention, router, embeddings) bf16.
    _preset("gpt-oss-20b", "openai/gpt-oss-20b", parameters=20_914_757_184, layers=24,
            attention_heads=64, kv_heads=8, head_dim=64, hidden_size=2880, vocab_size=201088,
            max_context=131072, dtype="mxfp4", unquantized_parameters=1_804_459_584,
            local_layers=12, local_kind="slidingWindow", local_window=128, experts=32,
            active_experts=4),
    _preset("gpt-oss-120b", "openai/gpt-oss-120b", parameters=116_829_156_672, layers=36,
            attention_heads=64, kv_heads=8, head_dim=64, hidden_size=2880, vocab_size=201088,
            max_context=131072, dtype="mxfp4", unquantized_parameters=2_167_371_072,
            local_layers=18, local_kind="slidingWindow", local_window=128, experts=128,
            active_experts=4),
    # Gemma 3: 5 local (1024-token sliding window) : 1 global layers; multimodal, so parameters
    # include the SigLIP vision tower (417 M) and its projector, which vLLM loads too.
    _preset("gemma-3-4b", "google/gemma-3-4b-it", parameters=4_300_079_472, layers=34,
            attention_heads=8, kv_heads=4, head_dim=256, hidden_size=2560, vocab_size=262208,
            max_context=131072, tied_embeddings=True, local_layers=29,
            local_kind="slidingWindow", local_window=1024),
    _preset("gemma-3-12b", "google/gemma-3-12b-it", parameters=12_187_325_040, layers=48,
            attention_heads=16, kv_heads=8, head_dim=256, hidden_size=3840, vocab_size=262208,
            max_context=131072, tied_embeddings=True, local_layers=40,
            local_kind="slidingWindow", local_window=1024),
    _preset("gemma-3-27b", "google/gemma-3-27b-it", parameters=27_432_406_640, layers=62,
            attention_heads=32, kv_heads=16, head_dim=128, hidden_size=5376, vocab_size=262208,
            max_context=131072, tied_embeddings=True, local_layers=52,
            local_kind="slidingWindow", local_window=1024),
    # Llama 4: 3 of every 4 layers attend within 8192-token chunks (the 4th is global, no RoPE);
    # every layer (Scout) or every other layer (Maverick) is MoE, one routed expert + a shared
    # one per token.  parameters include the vision encoder (871,932,416).
    _preset("llama-4-scout-17b-16e", "meta-llama/Llama-4-Scout-17B-16E-Instruct",
            parameters=108_641_793_536, layers=48, attention_heads=40, kv_heads=8, head_dim=128,
            hidden_size=5120, vocab_size=202048, max_context=10485760, local_layers=36,
            local_kind="chunked", local_window=8192, experts=16, active_experts=1),
    _preset("llama-4-maverick-17b-128e", "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
            parameters=401_583_781_376, layers=48, attention_heads=40, kv_heads=8, head_dim=128,
            hidden_size=5120, vocab_size=202048, max_context=1048576, local_layers=36,
            local_kind="chunked", local_window=8192, experts=128, active_experts=1),
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
    if "-distill-" in name:  # DeepSeek-R1-Distill-Qwen-7B is a Qwen, not a DeepSeek-R1
        name = name.split("-distill-", 1)[1]
    matches = [p for p in _PRESET_LIST if name == p.name or name.startswith(p.name + "-")]
    # The longest name wins: Qwen2.5-7B-Instruct-AWQ is qwen2.5-7b-instruct, not qwen2.5-7b.
    return max(matches, key=lambda p: len(p.name), default=None)
