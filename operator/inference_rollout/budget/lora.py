"""LoRA adapters in the memory budget and the lints (issue 31, item 2).

With ``--enable-lora`` vLLM wraps every linear layer of the model (the attention's q/k/v and
output, the MLP's gate/up and down), the token embeddings and the LM head, and gives each wrapped
layer zero-filled GPU buffers for ``--max-loras`` adapters of rank ``--max-lora-rank``: A of
``rank × input`` and B of ``output × rank`` per slot, in ``--lora-dtype`` (``auto``: the model's).
The buffers exist whatever adapters are loaded (an adapter is copied into a free slot, a smaller
rank zero-padded), and they are allocated while the model loads, so they come out of the KV-cache
pool as the weights do.  Adapters themselves wait in CPU memory (an LRU of ``--max-cpu-loras``).

Per GPU, for a dense decoder of hidden size H, attention heads nh of size D, KV heads nkv, MLP
width I, L layers, vocabulary V and tensor parallelism T, one slot of rank R holds
``R × [L × (7H + (2·nh·D + 2·nkv·D + 3I) / T) + 2V + 2H]`` elements (K and V replicated when
nkv < T; the embedding and LM head terms are not sharded; with ``--fully-sharded-loras`` the 7H
is divided by T too).  That is the size of one rank-R adapter on every module; the MLP width is
read back from the parameter count (``parameters = L·(attention + 3·H·I) + 2·V·H``).  Source:
vLLM 0.12's ``vllm/lora/layers`` (``create_lora_weights``) and ``config/lora.py``; an estimate,
not a measurement (docs/budget.md).  Mixture-of-experts layers carry LoRA differently and are
not counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .dtypes import activation_bytes
from .findings import Finding, Severity, arg_field
from .presets import ModelArchitecture

#: ``--max-lora-rank`` values vLLM accepts (0.12; 1 is new there).
LORA_RANKS = frozenset({1, 8, 16, 32, 64, 128, 256, 320, 512})
DEFAULT_MAX_LORAS = 1
DEFAULT_MAX_LORA_RANK = 16
LORA_DTYPES = frozenset({"auto", "float16", "bfloat16"})
#: The env var that opens ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``.
RUNTIME_UPDATING_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
#: Flags that configure LoRA and mean nothing without ``--enable-lora``.
LORA_FLAGS = ("--max-loras", "--max-lora-rank", "--max-cpu-loras", "--lora-dtype",
              "--fully-sharded-loras", "--lora-modules")


@dataclass(frozen=True)
class AdapterFact:
    """One of ``spec.adapters`` as the lints see it."""

    name: str
    base_model: str | None  # spec.adapters[].baseModel, when given


@dataclass(frozen=True)
class LoraConfig:
    """The LoRA flags of a vLLM command line that has ``--enable-lora``."""

    max_loras: int = DEFAULT_MAX_LORAS
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK
    max_cpu_loras: int | None = None  # None: max_loras
    lora_dtype: str = "auto"
    fully_sharded: bool = False
    static_adapters: int = 0  # adapters named by --lora-modules (loaded at start)

    @property
    def cpu_cache(self) -> int:
        return self.max_cpu_loras or self.max_loras


def lora_bytes_per_gpu(model: ModelArchitecture, lora: LoraConfig, dtype: str, hidden: int,
                       tensor_parallel: int, pipeline_parallel: int) -> int | None:
    """The LoRA buffers of one GPU (module doc), or None for a mixture-of-experts model."""
    if model.experts:
        return None
    t = tensor_parallel
    heads = model.attention_heads or max(1, hidden // model.head_dim)
    q_width, kv_width = heads * model.head_dim, model.kv_heads * model.head_dim
    vocab = model.vocab_size or 0
    attention = 2 * hidden * q_width + 2 * hidden * kv_width  # q, o; k, v
    per_layer_params = max(0.0, (model.parameters - 2 * vocab * hidden) / model.layers
                           - attention)
    mlp_width3 = per_layer_params / hidden  # 3 × I: gate, up and down each hold H × I
    kv_per_gpu = kv_width / t if model.kv_heads >= t else model.head_dim  # replicated below T
    replicated = 7 * hidden / (t if lora.fully_sharded else 1)
    layer = replicated + (2 * q_width + mlp_width3) / t + 2 * kv_per_gpu
    layers = math.ceil(model.layers / pipeline_parallel)
    # the embeddings sit on the first pipeline stage and the LM head on the last
    ends = (2 if pipeline_parallel == 1 else 1) * (vocab + hidden)
    element = 2.0 if lora.lora_dtype in ("float16", "bfloat16") else activation_bytes(dtype)
    return round(lora.max_loras * lora.max_lora_rank * (layers * layer + ends) * element)


def lora_findings(lora: LoraConfig | None, given: frozenset[str], runtime_updating: bool,
                  adapters: Sequence[AdapterFact] = (), model: str | None = None) -> list[Finding]:
    """Lints of the LoRA flags that need no model: flags without ``--enable-lora``, a CPU cache
    smaller than the adapters served, adapters that only a restart can change.  With
    ``spec.adapters`` (served at run time, docs/adapters.md) what would only slow or restrict
    a release is an error: without LoRA, runtime updating or the right base model, an adapter
    release cannot run at all."""
    if lora is None:
        if adapters:
            return [Finding(
                "LORA-ADAPTERS-NEED-LORA", Severity.ERROR, arg_field("--enable-lora"),
                f"spec.adapters names {len(adapters)} adapter{'s' if len(adapters) != 1 else ''} "
                f"but the vLLM container has no --enable-lora: add --enable-lora (and "
                f"{RUNTIME_UPDATING_ENV}=true to its env), or remove spec.adapters",
            )]
        ignored = [f for f in LORA_FLAGS if f in given]
        return [Finding(
            "LORA-NOT-ENABLED", Severity.WARNING, arg_field(ignored[0]),
            f"{', '.join(ignored)} {'has' if len(ignored) == 1 else 'have'} no effect without "
            "--enable-lora: vLLM serves no adapter. Add --enable-lora, or remove them",
        )] if ignored else []
    findings = []
    served = lora.static_adapters + len(adapters)
    if served > lora.cpu_cache:
        named = (f"--lora-modules and spec.adapters name {served}" if adapters
                 and lora.static_adapters else
                 f"{'spec.adapters' if adapters else '--lora-modules'} names {served}")
        findings.append(Finding(
            "LORA-CPU-CACHE", Severity.WARNING, arg_field("--max-cpu-loras"),
            f"{named} adapters but vLLM keeps {lora.cpu_cache} in CPU memory (--max-cpu-loras, "
            "default --max-loras): a request for an evicted one waits while it is read from "
            f"storage again. Raise --max-cpu-loras to {served}",
        ))
    if not runtime_updating:
        findings.append(Finding(
            "LORA-RUNTIME-UPDATES", Severity.ERROR if adapters else Severity.INFO,
            arg_field("--enable-lora"),
            f"{RUNTIME_UPDATING_ENV} is not true in the container's env, so adapters change only "
            "with a new pod template (a restart and a model load per pod)"
            + (", and spec.adapters cannot be released at all" if adapters else "")
            + "; set it to true to let adapters be loaded and unloaded at run time "
            "(/v1/load_lora_adapter)",
        ))
    for i, adapter in enumerate(adapters):
        if adapter.base_model is not None and model is not None and adapter.base_model != model:
            findings.append(Finding(
                "LORA-BASE-MODEL", Severity.ERROR, f"spec.adapters[{i}].baseModel",
                f"adapter {adapter.name} was trained on {adapter.base_model} but the pods serve "
                f"--model {model}: vLLM would load it onto the wrong weights. Fix "
                f"spec.adapters[{i}].baseModel or the template's --model",
            ))
    return findings


def lora_budget_note(lora_bytes: int | None, lora: LoraConfig) -> Finding:
    """What the budget counted for LoRA, or that it could not."""
    if lora_bytes is None:
        return Finding(
            "P2-LORA-UNCOUNTED", Severity.INFO, arg_field("--enable-lora"),
            "LoRA buffers of a mixture-of-experts model are not in this budget (vLLM wraps its "
            "experts differently): keep extra headroom",
        )
    return Finding(
        "P2-LORA", Severity.INFO, arg_field("--max-loras"),
        f"LoRA buffers: {lora_bytes / 2**30:.2f} GiB per GPU ({lora.max_loras} "
        f"slot{'s' if lora.max_loras != 1 else ''} of rank {lora.max_lora_rank} on every linear "
        "layer, the embeddings and the LM head), allocated before the KV cache and counted with "
        "the weights; each slot or doubling of --max-lora-rank costs as much again",
    )
