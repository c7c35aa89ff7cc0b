"""Principle 11: a release that lowers precision (weights or KV cache) needs a business gate.

Its own module because "did precision drop?" needs care: ``--kv-cache-dtype auto`` on a bf16
model is bfloat16, kernel variants (``gptq_marlin``) are the same quantization, and going back to
more bytes (de-quantizing) loses nothing, so only a loss is gated.
"""

from __future__ import annotations

from dataclasses import dataclass

from .args import VllmArgs, VllmArgsError, parse_vllm_args
from .dtypes import (
    FLOAT16_BYTES,
    activation_bytes,
    kv_cache_bytes,
    normalized_kv_cache_dtype,
    stored_weight_bytes,
    weight_quantization,
)
from .facts import ReleaseFacts
from .findings import Finding, Severity
from .presets import ModelArchitecture, preset_for_model


@dataclass(frozen=True)
class Precision:
    """Weights and KV-cache precision of a release, comparable across releases."""

    weights: str  # "unquantized", or the method: awq, fp8, ... (kernel variants folded)
    weight_bytes: float
    kv: str  # "16-bit" (auto on a 16-bit model, bfloat16, float16), fp8_e4m3, ...
    kv_bytes: float

    def __str__(self) -> str:
        weights = self.weights if self.weights == "unquantized" else \
            f"{self.weights}@{self.weight_bytes:.2f}"
        return f"{weights}/{self.kv}"


def precision_of(args: VllmArgs, model: ModelArchitecture | None = None) -> Precision:
    """``--kv-cache-dtype auto`` is the activation dtype, so on a 16-bit model it is the same
    precision as an explicit bfloat16/float16; a quantized ``spec.model.dtype`` counts as the
    weights' method."""
    quantization = weight_quantization(args.quantization, args.model)
    activation = activation_bytes(args.dtype)
    if quantization is not None:
        method = quantization.method.removesuffix("_marlin").removesuffix("_bitblas")
        weights, weight_bytes = method, quantization.bytes_per_weight
    elif model is not None and stored_weight_bytes(model.dtype) is not None:
        weights, weight_bytes = model.dtype, stored_weight_bytes(model.dtype) or activation
    else:
        weights, weight_bytes = "unquantized", activation
    kv_bytes, _ = kv_cache_bytes(args.kv_cache_dtype, activation)
    kv = normalized_kv_cache_dtype(args.kv_cache_dtype)
    if kv in ("auto", "bfloat16", "float16") and kv_bytes == FLOAT16_BYTES:
        kv = "16-bit"
    return Precision(weights, weight_bytes, kv, kv_bytes)


def _loses_precision(before: Precision, after: Precision) -> bool:
    """A change to fewer bytes, or to another format of the same width, can cost quality; going
    back to more bytes (AWQ → bf16, fp8 KV → auto) cannot."""
    weights_down = (after.weights, after.weight_bytes) != (before.weights, before.weight_bytes) \
        and after.weight_bytes <= before.weight_bytes
    kv_down = after.kv != before.kv and after.kv_bytes <= before.kv_bytes
    return weights_down or kv_down


def quantization_gate(facts: ReleaseFacts, args: VllmArgs,
                       model: ModelArchitecture | None) -> list[Finding]:
    if facts.stable_container_args is None:
        return []
    try:
        stable = parse_vllm_args(facts.stable_container_args)
    except VllmArgsError:
        return []  # the stable release is serving; its args are not this release's problem
    stable_model = facts.model or preset_for_model(stable.model)
    before, after = precision_of(stable, stable_model), precision_of(args, model)
    has_business_metric = any(m.query for m in facts.metrics)
    if not _loses_precision(before, after) or facts.evaluation_present or has_business_metric:
        return []
    return [Finding(
        "P11-QUANT-GATE", Severity.ERROR, "spec.evaluation",
        f"this release lowers precision (weights/KV cache) from {before} to {after} with no "
        "business check: benchmarks like MMLU rarely show what quantization costs your prompts. "
        "Add spec.evaluation (your evaluation set, run on canary and stable before traffic) or a "
        "business metric in spec.analysis.metrics (a query with minRatioToStable)",
    )]
