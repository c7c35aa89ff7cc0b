"""The GPU memory budget of one vLLM replica (Principle 2), the way vLLM itself spends memory.

vLLM takes ``--gpu-memory-utilization`` of each GPU up front.  From that share it subtracts the
weights and the temporaries its profiling run measured; what is left is the KV-cache pool, cut
into blocks of ``--block-size`` tokens and shared by the model's layer types as :mod:`.kv`
describes (full, sliding-window and chunked layers; MLA).  So the questions are (a) does the pool
hold one ``--max-model-len`` request (vLLM refuses to start otherwise) and (b) how many fit at
once against ``--max-num-seqs`` (more are preempted and recomputed).  The principles text's rule
"weights + KV + temporaries + 20% headroom" is reported as ``headroom``.

All sizes are per GPU of a replica of ``--tensor-parallel-size`` × ``--pipeline-parallel-size``
GPUs, except ``kv_bytes_per_token`` and ``full_context_kv_bytes`` which are for the whole model.

Temporaries (documented in docs/budget.md, an estimate, not a measurement):
  1 GiB fixed (CUDA graphs, NCCL and custom all-reduce buffers, cuBLAS workspaces, allocator
  slack) + the activations of one batch of ``--max-num-batched-tokens`` tokens, taken as
  (4 + 12 / TP) × hidden_size elements per token (residual stream and norms replicated on every
  GPU; q/k/v, attention output, gate/up and activated MLP sharded by TP) + the sampler's float32
  logits and probabilities for ``--max-num-seqs`` sequences (2 × 4 bytes × vocab each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .args import VllmArgs
from .dtypes import (
    activation_bytes,
    kv_cache_bytes,
    stored_weight_bytes,
    unquantized_weight_bytes,
    weight_quantization,
)
from .findings import Finding, Severity, arg_field, model_field
from .gpu import GpuSpec
from .kv import KvLayout, kv_layout
from .lora import lora_budget_note, lora_bytes_per_gpu
from .presets import ModelArchitecture, preset_for_model
from .units import GIB, gib
from .vllm_defaults import (
    DEFAULT_BLOCK_SIZE,
    effective_max_num_batched_tokens,
    effective_max_num_seqs,
    max_num_seqs_default_note,
)

FIXED_OVERHEAD_BYTES = GIB
ACTIVATION_REPLICATED_WIDTH = 4  # × hidden_size per token, on every GPU
ACTIVATION_SHARDED_WIDTH = 12  # × hidden_size per token, divided across tensor-parallel GPUs
LOGIT_BYTES = 4  # the sampler works in float32
LOGIT_COPIES = 2  # logits and probabilities
MIN_HEADROOM = 0.20  # the principles text: budget weights + KV + temporaries + 20%
_DRAFT_FREE_METHODS = frozenset({"ngram", "suffix"})  # prompt lookup: no draft weights or KV


@dataclass(frozen=True)
class MemoryBudget:
    model: ModelArchitecture
    gpu: GpuSpec
    gpus_per_replica: int
    gpu_memory_utilization: float
    max_model_len: int | None  # None: neither --max-model-len nor the model's context is known
    max_num_seqs: int  # as given, or vLLM's default for this GPU
    weight_bytes_per_gpu: int
    temporary_bytes_per_gpu: int
    kv_bytes_per_token: int  # whole model, every layer: 2 × kv_heads × head_dim (or the MLA
    # latent) × KV dtype bytes × layers
    kv_bytes_per_token_per_gpu: int  # kv heads split across TP (at least 1), layers across PP
    kv_pool_bytes_per_gpu: int  # negative when weights and temporaries exceed vLLM's share
    pool_tokens: int  # vLLM's "GPU KV cache size" (blocks / KV cache groups × block size)
    full_length_sequences: int | None  # max_model_len requests the pool holds at once
    sequence_kv_bytes_per_gpu: int | None  # one max_model_len request (local layers: the window)
    full_context_kv_bytes: int | None  # max_num_seqs max_model_len requests, whole model
    full_context_kv_bytes_per_gpu: int | None
    headroom: float | None  # 1 − (weights + temporaries + full-context KV) / GPU memory
    findings: tuple[Finding, ...]
    kv: KvLayout  # one GPU's KV cache by layer type

    @property
    def gpu_memory_bytes(self) -> int:
        return int(self.gpu.memory_gib * GIB)


def kv_bytes_per_token_per_gpu(
    model: ModelArchitecture, kv_element_bytes: float, tensor_parallel: int, pipeline_parallel: int
) -> int:
    """Every layer's KV bytes for one token on one GPU: kv heads split across TP (replicated when
    TP > kv heads, so at least one per GPU; the MLA latent is on every GPU), layers across PP
    stages (the largest stage)."""
    return kv_layout(model, kv_element_bytes, tensor_parallel=tensor_parallel,
                     pipeline_parallel=pipeline_parallel).token_bytes


def kv_bytes_per_token(model: ModelArchitecture, kv_element_bytes: float) -> int:
    """The whole model's KV bytes per token: GQA-aware (kv_heads, not attention heads)."""
    return kv_bytes_per_token_per_gpu(model, kv_element_bytes, 1, 1)


def estimated_hidden_size(model: ModelArchitecture) -> int:
    """A dense decoder has about 12 × layers × hidden² parameters; used when no preset says."""
    return model.hidden_size or max(1, round(math.sqrt(model.parameters / (12 * model.layers))))


def weight_bytes(model: ModelArchitecture, args: VllmArgs) -> float:
    """The whole model's weights.  Quantization (``--quantization``, a quantized checkpoint name,
    or a quantized ``spec.model.dtype``) leaves the model's unquantized parameters (embeddings,
    LM head) in 16 bits."""
    quantization = weight_quantization(args.quantization, args.model)
    per_weight = (quantization.bytes_per_weight if quantization is not None
                  else stored_weight_bytes(model.dtype))
    if per_weight is None:
        return model.parameters * unquantized_weight_bytes(args.dtype)
    kept = model.unquantized_parameters
    return (model.parameters - kept) * per_weight + kept * activation_bytes(args.dtype)


def _draft_model(args: VllmArgs) -> tuple[ModelArchitecture | None, Finding | None]:
    """The speculative draft model, when it is a preset; else a note that it is not counted."""
    spec = args.speculative
    if spec is None or (spec.method or "").lower() in _DRAFT_FREE_METHODS:
        return None, None
    draft = preset_for_model(spec.model)
    if draft is not None:
        return draft, None
    return None, Finding(
        "P2-DRAFT-UNCOUNTED", Severity.INFO, arg_field("--speculative-config"),
        f"the speculative {spec.method or 'draft'} model {spec.model or ''!s} is not a known "
        "preset, so its weights and KV cache are not in this budget (EAGLE/MTP heads are about "
        "one decoder layer; a draft model is a whole small model): keep extra headroom",
    )


def _input_notes(model: ModelArchitecture, args: VllmArgs, kv_known: bool) -> list[Finding]:
    notes: list[Finding] = []
    quantization = weight_quantization(args.quantization, args.model)
    if quantization is not None and quantization.from_name:
        notes.append(Finding(
            "P2-QUANT-FROM-NAME", Severity.INFO, arg_field("--model"),
            f"the checkpoint name {args.model!r} says {quantization.method}; the budget counts "
            f"{quantization.bytes_per_weight:.2f} byte per weight (pass --quantization to be "
            "explicit)",
        ))
    if quantization is not None and not quantization.bits_known:
        notes.append(Finding(
            "P2-QUANT-ASSUMED", Severity.INFO, arg_field("--quantization"),
            f"the bit width of {quantization.method} depends on the checkpoint; the budget assumed "
            "8-bit weights (a name with W4A16/Int4 or W8A8/Int8 would tell)",
        ))
    if not kv_known:
        notes.append(Finding(
            "P2-KV-DTYPE-ASSUMED", Severity.INFO, arg_field("--kv-cache-dtype"),
            f"unknown --kv-cache-dtype {args.kv_cache_dtype!r}: the budget assumed the activation "
            "dtype (16-bit)",
        ))
    if model.hidden_size is None:
        notes.append(Finding(
            "P2-HIDDEN-ESTIMATED", Severity.INFO, model_field("preset"),
            f"hidden size estimated as {estimated_hidden_size(model)} from the parameter count "
            "(for the activation estimate only); a preset gives the exact value",
        ))
    return notes


def compute_budget(model: ModelArchitecture, args: VllmArgs, gpu: GpuSpec, *,
                   allow_long_max_model_len: bool = False) -> MemoryBudget:
    """The memory budget of ``model`` served with ``args`` on GPUs like ``gpu``.
    ``allow_long_max_model_len``: the container sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."""
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    gpus = args.gpus_per_replica
    act_bytes = activation_bytes(args.dtype)
    kv_element, kv_known = kv_cache_bytes(args.kv_cache_dtype, act_bytes)
    findings = _input_notes(model, args, kv_known)

    draft, draft_note = _draft_model(args)
    findings += [draft_note] if draft_note else []
    spec = args.speculative
    draft_tp = (spec.draft_tensor_parallel_size if spec else None) or tp

    declared_len = None if args.max_model_len_auto else (args.max_model_len or model.max_context)
    max_num_seqs = effective_max_num_seqs(args, gpu, declared_len)
    batched_tokens = effective_max_num_batched_tokens(args, gpu, declared_len)
    block = args.block_size or DEFAULT_BLOCK_SIZE
    weights = weight_bytes(model, args) / gpus
    draft_layers_gpu = draft_layers_whole = 0
    if draft is not None:  # the draft keeps its own weights and KV cache in the same GPU memory
        draft_args = VllmArgs(model=spec.model if spec else None, dtype=args.dtype)
        weights += weight_bytes(draft, draft_args) / (draft_tp * pp)
        # vLLM puts a draft's (full-attention) layers beside the target's in its KV groups.
        draft_layers_gpu = _draft_layers(draft, model, kv_element, draft_tp, tp, pp)
        draft_layers_whole = _draft_layers(draft, model, kv_element, 1, 1, 1)
    weights = max(0.0, weights - args.cpu_offload_gb * GIB)
    if args.lora is not None:  # allocated while the model loads: out of the pool like weights
        lora = lora_bytes_per_gpu(model, args.lora, args.dtype, estimated_hidden_size(model),
                                  tp, pp)
        weights += lora or 0
        findings.append(lora_budget_note(lora, args.lora))
    layout = kv_layout(model, kv_element, tensor_parallel=tp, pipeline_parallel=pp,
                       block_size=block, batched_tokens=batched_tokens,
                       hybrid=args.hybrid_kv_cache, extra_full_layers=draft_layers_gpu)
    whole = kv_layout(model, kv_element, block_size=block, batched_tokens=batched_tokens,
                      hybrid=args.hybrid_kv_cache, extra_full_layers=draft_layers_whole)

    hidden = estimated_hidden_size(model)
    activations = batched_tokens * (
        ACTIVATION_REPLICATED_WIDTH + ACTIVATION_SHARDED_WIDTH / tp) * hidden * act_bytes
    logits = max_num_seqs * (model.vocab_size or 0) * LOGIT_BYTES * LOGIT_COPIES
    temporaries = FIXED_OVERHEAD_BYTES + activations + logits

    gpu_bytes = gpu.memory_gib * GIB
    if args.kv_cache_memory_bytes is not None:
        pool = float(args.kv_cache_memory_bytes)
    else:
        pool = gpu_bytes * args.gpu_memory_utilization - weights - temporaries
    pool_tokens = layout.pool_tokens(pool)

    max_model_len = declared_len
    if args.max_model_len_auto:  # vLLM fits the longest length the pool holds
        max_model_len = layout.longest_sequence(pool, model.max_context or pool_tokens)

    full_length = sequence = full_context = full_context_gpu = None
    headroom = None
    if max_model_len:
        full_length = layout.sequences(pool, max_model_len)
        sequence = layout.sequence_bytes(max_model_len)
        full_context = max_num_seqs * whole.sequence_bytes(max_model_len)
        full_context_gpu = max_num_seqs * sequence
        headroom = 1 - (weights + temporaries + full_context_gpu) / gpu_bytes

    budget = MemoryBudget(
        model=model, gpu=gpu, gpus_per_replica=gpus,
        gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=max_model_len,
        max_num_seqs=max_num_seqs, weight_bytes_per_gpu=round(weights),
        temporary_bytes_per_gpu=round(temporaries), kv_bytes_per_token=whole.token_bytes,
        kv_bytes_per_token_per_gpu=layout.token_bytes, kv_pool_bytes_per_gpu=math.floor(pool),
        pool_tokens=pool_tokens, full_length_sequences=full_length,
        sequence_kv_bytes_per_gpu=sequence, full_context_kv_bytes=full_context,
        full_context_kv_bytes_per_gpu=full_context_gpu, headroom=headroom, findings=(),
        kv=layout,
    )
    capacity = _capacity_findings(budget, args, allow_long_max_model_len)
    return replace(budget, findings=(*capacity, *findings))


def _draft_layers(draft: ModelArchitecture, model: ModelArchitecture, kv_element: float,
                  draft_tp: int, tp: int, pp: int) -> int:
    """The draft's KV per token as a count of the target's layers (vLLM needs one page size)."""
    draft_bytes = kv_layout(draft, kv_element, tensor_parallel=draft_tp,
                            pipeline_parallel=pp).token_bytes
    target_layer = kv_layout(model, kv_element, tensor_parallel=tp).layer_token_bytes
    return math.ceil(draft_bytes / target_layer)


def _capacity_findings(b: MemoryBudget, args: VllmArgs,
                       allow_long_max_model_len: bool) -> list[Finding]:
    usable_gib = gib(b.gpu_memory_bytes * b.gpu_memory_utilization)
    weights_gib, temps_gib = gib(b.weight_bytes_per_gpu), gib(b.temporary_bytes_per_gpu)
    pool_gib = gib(b.kv_pool_bytes_per_gpu)
    if args.kv_cache_memory_bytes is None and b.kv_pool_bytes_per_gpu <= 0:
        return [Finding(
            "P2-WEIGHTS", Severity.ERROR, arg_field("--tensor-parallel-size"),
            f"weights ({weights_gib:.1f} GiB) and temporaries ({temps_gib:.1f} GiB) per GPU "
            f"exceed the {usable_gib:.1f} GiB vLLM may use ({b.gpu_memory_utilization:g} × "
            f"{b.gpu.memory_gib:g} GiB): raise --tensor-parallel-size (now "
            f"{args.tensor_parallel_size}), quantize (--quantization fp8 halves 16-bit weights), "
            "or use GPUs with more memory",
        )]
    if args.kv_cache_memory_bytes is not None:
        total_gib = weights_gib + temps_gib + pool_gib
        if total_gib > b.gpu.memory_gib:
            return [Finding(
                "P2-KV-POOL", Severity.ERROR, arg_field("--kv-cache-memory-bytes"),
                f"weights {weights_gib:.1f} + temporaries {temps_gib:.1f} + "
                f"--kv-cache-memory-bytes {pool_gib:.1f} GiB = {total_gib:.1f} GiB exceed the "
                f"GPU's {b.gpu.memory_gib:g} GiB: lower --kv-cache-memory-bytes",
            )]
    needed = b.max_model_len or 0
    if b.pool_tokens == 0 and needed == 0:
        return [Finding(
            "P2-KV-POOL", Severity.ERROR, arg_field("--gpu-memory-utilization"),
            f"no whole KV block fits ({pool_gib:.2f} GiB per GPU left after weights and "
            "temporaries), so vLLM refuses to start: raise --gpu-memory-utilization or "
            "--tensor-parallel-size, or quantize",
        )]
    sequence = b.sequence_kv_bytes_per_gpu or 0
    if sequence > b.kv_pool_bytes_per_gpu:
        longest = b.kv.longest_sequence(b.kv_pool_bytes_per_gpu, needed)
        return [Finding(
            "P2-KV-POOL", Severity.ERROR, arg_field("--max-model-len"),
            f"the KV pool holds {b.pool_tokens:,} tokens ({pool_gib:.1f} GiB per GPU) but one "
            f"{needed:,}-token sequence needs {gib(sequence):.1f} GiB, so vLLM refuses to start: "
            f"lower --max-model-len to at most {longest:,}, or make room with "
            "--kv-cache-dtype fp8, a higher --gpu-memory-utilization or --tensor-parallel-size",
        )]
    findings: list[Finding] = []
    model_context = b.model.max_context
    if args.max_model_len and model_context and args.max_model_len > model_context:
        tolerated = allow_long_max_model_len or args.context_overridden
        findings.append(Finding(
            "P2-CONTEXT-LIMIT", Severity.WARNING if tolerated else Severity.ERROR,
            arg_field("--max-model-len"),
            f"--max-model-len {args.max_model_len:,} exceeds the model's context "
            f"({model_context:,} max_position_embeddings): " + (
                "allowed here (VLLM_ALLOW_LONG_MAX_MODEL_LEN or a rope override), but quality "
                "past the trained length is not guaranteed" if tolerated else
                "vLLM refuses to start. Lower it, configure rope scaling (--hf-overrides), or "
                "set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the container's env")))
    if b.max_model_len is None:
        findings.append(Finding(
            "P2-NO-MAX-MODEL-LEN", Severity.INFO, arg_field("--max-model-len"),
            "set --max-model-len: the model's context length is unknown, so the budget cannot "
            "check that one full-length sequence fits",
        ))
        return findings
    if b.full_length_sequences is not None and b.full_length_sequences < b.max_num_seqs:
        default_note = "" if args.max_num_seqs else f" ({max_num_seqs_default_note(b.gpu)})"
        findings.append(Finding(
            "P2-PREEMPTION", Severity.WARNING, arg_field("--max-num-seqs"),
            f"the KV pool ({b.pool_tokens:,} tokens) holds {b.full_length_sequences} sequences of "
            f"--max-model-len {b.max_model_len:,} tokens but --max-num-seqs is "
            f"{b.max_num_seqs}{default_note}: when long requests meet, vLLM preempts and "
            f"recomputes them. Lower --max-num-seqs to {max(1, b.full_length_sequences)} or "
            "--max-model-len, or add KV room (--kv-cache-dtype fp8, more tensor parallelism)",
        ))
    if b.headroom is not None and b.headroom < MIN_HEADROOM:
        kv_gib = gib(b.full_context_kv_bytes_per_gpu or 0)
        findings.append(Finding(
            "P2-HEADROOM", Severity.WARNING, arg_field("--max-num-seqs"),
            f"headroom is {b.headroom:.0%} (< {MIN_HEADROOM:.0%}): weights {weights_gib:.1f} + "
            f"temporaries {temps_gib:.1f} + full-context KV {kv_gib:.1f} GiB "
            f"({b.max_num_seqs} × {b.max_model_len:,} tokens) per GPU against "
            f"{b.gpu.memory_gib:g} GiB. Lower --max-num-seqs or --max-model-len until the sum "
            "leaves 20% free",
        ))
    return findings
