"""vLLM's defaults for the flags the budget reads (V1 engine, vLLM ≥ 0.9).

Checked against the vLLM source: ``vllm/engine/arg_utils.py`` (``EngineArgs.get_batch_defaults``
and ``_set_default_max_num_seqs_and_batched_tokens_args``) and ``vllm/config/cache.py``:

- ``--gpu-memory-utilization`` 0.9; ``--block-size`` 16 on CUDA.
- ``--max-num-seqs`` and ``--max-num-batched-tokens`` depend on the GPU, for the OpenAI server:
  on GPUs with at least 70 GiB other than A100 (H100, H200, MI300X, ...) 1024 and 8192,
  elsewhere 256 and 2048.  (V0 used 256 everywhere; the dataclass default 128 applies only when no
  usage context is set.)  ``--max-num-seqs`` is then capped at ``--max-num-batched-tokens``.
- Chunked prefill is on for generative models.  When it is off, ``--max-num-batched-tokens``
  defaults to at least ``--max-model-len`` (a whole prompt is one batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .gpu import GpuSpec

if TYPE_CHECKING:  # args imports this module's constants
    from .args import VllmArgs

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_BLOCK_SIZE = 16
LARGE_GPU_MIN_GIB = 70
SMALL_GPU_MAX_NUM_SEQS = 256
LARGE_GPU_MAX_NUM_SEQS = 1024
SMALL_GPU_MAX_NUM_BATCHED_TOKENS = 2048
LARGE_GPU_MAX_NUM_BATCHED_TOKENS = 8192


def is_large_gpu(gpu: GpuSpec | None) -> bool:
    """vLLM's "H100-class" test; an unknown GPU gets the smaller defaults, as vLLM does."""
    if gpu is None:
        return False
    return gpu.memory_gib >= LARGE_GPU_MIN_GIB and "a100" not in (gpu.product or "").lower()


def default_max_num_seqs(gpu: GpuSpec | None) -> int:
    return LARGE_GPU_MAX_NUM_SEQS if is_large_gpu(gpu) else SMALL_GPU_MAX_NUM_SEQS


def effective_max_num_batched_tokens(
    args: VllmArgs, gpu: GpuSpec | None, max_model_len: int | None
) -> int:
    if args.max_num_batched_tokens is not None:
        return args.max_num_batched_tokens
    tokens = (
        LARGE_GPU_MAX_NUM_BATCHED_TOKENS if is_large_gpu(gpu) else SMALL_GPU_MAX_NUM_BATCHED_TOKENS
    )
    if args.enable_chunked_prefill is False and max_model_len is not None:
        tokens = max(tokens, max_model_len)
    if max_model_len is not None:
        max_num_seqs = args.max_num_seqs or default_max_num_seqs(gpu)
        tokens = min(tokens, max_num_seqs * max_model_len)
    return tokens


def effective_max_num_seqs(
    args: VllmArgs, gpu: GpuSpec | None, max_model_len: int | None = None
) -> int:
    if args.max_num_seqs is not None:
        return args.max_num_seqs
    batched_tokens = effective_max_num_batched_tokens(args, gpu, max_model_len)
    return min(default_max_num_seqs(gpu), batched_tokens)


def max_num_seqs_default_note(gpu: GpuSpec | None) -> str:
    """Says where an unset --max-num-seqs comes from, for messages."""
    where = "this GPU" if gpu is not None else "a GPU the manifest does not name"
    return (
        f"--max-num-seqs is not set, so vLLM uses its default for {where}: "
        f"{default_max_num_seqs(gpu)} ({LARGE_GPU_MAX_NUM_SEQS} on GPUs with ≥ "
        f"{LARGE_GPU_MIN_GIB} GiB other than A100, else {SMALL_GPU_MAX_NUM_SEQS})"
    )
