"""Bytes per weight and per KV-cache element, by dtype and by vLLM quantization method.

Why these numbers (docs/budget.md repeats them):

- 16-bit floats take 2 bytes, fp32 4.  vLLM's ``--dtype auto`` never serves a float32 checkpoint in
  float32: it down-casts to a 16-bit type (bfloat16 for Gemma 2), so "auto" + float32 = 2 bytes.
- FP8/INT8 weights take 1 byte (their per-tensor or per-channel scales are negligible).
- 4-bit integer methods (AWQ, GPTQ and their Marlin kernels, bitsandbytes NF4, ...) take 0.5 byte
  plus one 16-bit scale and one 4-bit zero point per group of 128 weights: 0.5 + 2.5/128 bytes.
  NVFP4 stores an 8-bit scale per 16 weights (0.5 + 1/16), MXFP4 one per 32 (0.5 + 1/32).
- Methods whose bit width depends on the checkpoint (compressed-tensors, GGUF, torchao, ...) are
  assumed to be 8-bit, and the budget says so in an info finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FLOAT16_BYTES = 2.0
FLOAT32_BYTES = 4.0
EIGHT_BIT_BYTES = 1.0
INT4_GROUP_BYTES = 0.5 + 2.5 / 128
NVFP4_BYTES = 0.5 + 1 / 16
MXFP4_BYTES = 0.5 + 1 / 32

# --dtype values (vLLM ModelConfig.dtype) and spec.model.dtype values, as bytes per element.
_FLOAT_DTYPE_BYTES = {
    "half": FLOAT16_BYTES,
    "float16": FLOAT16_BYTES,
    "bfloat16": FLOAT16_BYTES,
    "float": FLOAT32_BYTES,
    "float32": FLOAT32_BYTES,
}
VLLM_DTYPES = frozenset({"auto", *_FLOAT_DTYPE_BYTES})

# spec.model.dtype may name a quantized storage type (a pre-quantized checkpoint).
_STORAGE_DTYPE_BYTES = {"fp8": EIGHT_BIT_BYTES, "int8": EIGHT_BIT_BYTES, "int4": INT4_GROUP_BYTES,
                        "mxfp4": MXFP4_BYTES, "nvfp4": NVFP4_BYTES}

_QUANTIZATION_BYTES: dict[str, float] = {
    **dict.fromkeys(
        ("fp8", "fbgemm_fp8", "ptpc_fp8", "modelopt", "experts_int8", "tpu_int8"),
        EIGHT_BIT_BYTES,
    ),
    **dict.fromkeys(
        ("awq", "awq_marlin", "gptq", "gptq_marlin", "gptq_marlin_24", "gptq_bitblas", "marlin",
         "bitsandbytes", "moe_wna16", "auto-round", "ipex"),
        INT4_GROUP_BYTES,
    ),
    **dict.fromkeys(("modelopt_fp4", "petit_nvfp4", "nvfp4"), NVFP4_BYTES),
    **dict.fromkeys(("mxfp4", "fp_quant"), MXFP4_BYTES),
}
ASSUMED_QUANTIZATION_BYTES = EIGHT_BIT_BYTES

# --kv-cache-dtype values other than "auto" (which follows the activation dtype).
_KV_CACHE_DTYPE_BYTES = {
    "float16": FLOAT16_BYTES,
    "bfloat16": FLOAT16_BYTES,
    "int8": EIGHT_BIT_BYTES,
    "int8_per_token_head": EIGHT_BIT_BYTES,
    "nvfp4": NVFP4_BYTES,
}
# The values vLLM's CacheDType accepts across 0.9-0.2x (vllm/config/cache.py); "fp16" is not one.
KV_CACHE_DTYPES = frozenset({
    "auto", "float16", "bfloat16", "int8", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
    "int8_per_token_head", "fp8_per_token_head", "int4_per_token_head", "nvfp4",
})
KV_CACHE_DTYPE_PREFIXES = ("turboquant_",)


def float_dtype_bytes(dtype: str) -> float | None:
    """Bytes of a 16/32-bit float dtype name, or None for anything else."""
    return _FLOAT_DTYPE_BYTES.get(dtype.lower())


def activation_bytes(vllm_dtype: str) -> float:
    """Bytes per activation element: an explicit ``--dtype``, else 16 bits.

    ``auto`` never yields float32 (vLLM down-casts float32 checkpoints), and a quantized checkpoint
    still computes in 16 bits."""
    explicit = float_dtype_bytes(vllm_dtype)
    return FLOAT16_BYTES if explicit is None else explicit


def unquantized_weight_bytes(vllm_dtype: str) -> float:
    """Bytes per weight of an unquantized model: an explicit ``--dtype``, else 16 bits (a 16-bit
    model, or float32 down-cast by ``--dtype auto``)."""
    explicit = float_dtype_bytes(vllm_dtype)
    return FLOAT16_BYTES if explicit is None else explicit


def stored_weight_bytes(model_dtype: str) -> float | None:
    """Bytes per quantized weight of a pre-quantized checkpoint (``spec.model.dtype`` fp8, int8,
    int4, mxfp4, nvfp4), or None for a float model.  ``--dtype`` does not change these: it is the
    activation dtype."""
    return _STORAGE_DTYPE_BYTES.get(model_dtype.lower())


def kv_cache_bytes(kv_cache_dtype: str, activation: float) -> tuple[float, bool]:
    """(bytes per KV element, known).  ``auto`` stores the KV cache in the activation dtype."""
    name = kv_cache_dtype.lower()
    if name == "auto":
        return activation, True
    if name.startswith("fp8"):  # fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla
        return EIGHT_BIT_BYTES, True
    known = _KV_CACHE_DTYPE_BYTES.get(name)
    if known is not None:
        return known, True
    return activation, False


def normalized_kv_cache_dtype(kv_cache_dtype: str) -> str:
    """``fp8`` is an alias of ``fp8_e4m3``; compare KV precisions through this."""
    name = kv_cache_dtype.lower()
    return "fp8_e4m3" if name == "fp8" else name


@dataclass(frozen=True)
class WeightQuantization:
    method: str  # a vLLM --quantization method, e.g. awq, fp8
    bytes_per_weight: float
    bits_known: bool  # False: the method's bit width depends on the checkpoint; assumed 8-bit
    from_name: bool  # True: read from the checkpoint's name, not from --quantization


# Pre-quantized checkpoints load without --quantization (vLLM reads quantization_config from the
# checkpoint), so their names are the only offline hint: ...-AWQ, ...-GPTQ-Int8, ...-FP8, w4a16.
_NAME_TOKEN = re.compile(r"[a-z0-9]+")
_METHOD_BY_NAME_TOKEN = {
    "awq": "awq", "gptq": "gptq", "fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4",
    "gguf": "gguf", "bnb": "bitsandbytes", "w4a16": "compressed-tensors",
    "w8a8": "compressed-tensors", "w8a16": "compressed-tensors",
}
_BYTES_BY_NAME_TOKEN = {
    "int8": EIGHT_BIT_BYTES, "w8a8": EIGHT_BIT_BYTES, "w8a16": EIGHT_BIT_BYTES,
    "8bit": EIGHT_BIT_BYTES, "fp8": EIGHT_BIT_BYTES,
    "int4": INT4_GROUP_BYTES, "w4a16": INT4_GROUP_BYTES, "4bit": INT4_GROUP_BYTES,
    "nvfp4": NVFP4_BYTES, "mxfp4": MXFP4_BYTES,
}


def _name_tokens(model: str | None) -> list[str]:
    return _NAME_TOKEN.findall(model.lower()) if model else []


def weight_quantization(flag: str | None, model: str | None) -> WeightQuantization | None:
    """How the weights are quantized: from ``--quantization``, else from the checkpoint name.

    A bit width in the name (``-GPTQ-Int8``, ``w4a16``) wins over the method's usual width, since
    several methods (GPTQ, compressed-tensors) come in 4- and 8-bit variants."""
    tokens = _name_tokens(model)
    method = flag.lower() if flag else None
    from_name = False
    if method is None:
        method = next((_METHOD_BY_NAME_TOKEN[t] for t in tokens if t in _METHOD_BY_NAME_TOKEN),
                      None)
        from_name = method is not None
    if method is None:
        return None
    named_bytes = next((_BYTES_BY_NAME_TOKEN[t] for t in tokens if t in _BYTES_BY_NAME_TOKEN), None)
    if named_bytes is not None:
        return WeightQuantization(method, named_bytes, True, from_name)
    known = _QUANTIZATION_BYTES.get(method)
    if known is not None:
        return WeightQuantization(method, known, True, from_name)
    return WeightQuantization(method, ASSUMED_QUANTIZATION_BYTES, False, from_name)
