"""The KV cache of one GPU laid out the way vLLM's (V1) KV cache manager lays it out.

Why a module of its own: since vLLM 0.10 the pool is not "tokens × bytes per token" for every
model.  Checked against ``vllm/v1/kv_cache_interface.py`` and ``vllm/v1/core/kv_cache_utils.py``:

- A layer's page is ``block_size`` tokens × its bytes per token: 2 (K and V) × KV heads on this
  GPU × head_dim × KV dtype bytes (``FullAttentionSpec``), or for MLA one latent of
  ``kv_lora_rank + qk_rope_head_dim`` elements, not split across tensor-parallel ranks
  (``MLAAttentionSpec``).
- Layer types: full attention keeps every token; a sliding-window layer keeps at most
  ``window - 1 + max_num_batched_tokens`` tokens plus one block (``SlidingWindowSpec``); a chunked
  local-attention layer ``chunk + max_num_batched_tokens`` (``ChunkedLocalAttentionSpec``); never
  more than ``max_model_len``.
- The hybrid manager groups layers of one type into KV cache groups of ``group_size`` layers: the
  smallest layer count of a type, or the largest when it is under 1.5 × the smallest
  (``_get_kv_cache_groups_uniform_page_size``), the last group of a type padded.  A block holds
  ``group_size`` pages; every group takes blocks from one pool, so a request of ``L`` tokens needs
  ``full groups × ⌈L / block⌉ + local groups × window blocks`` blocks
  (``get_max_concurrency_for_kv_cache_config``).  vLLM reports ``blocks / groups × block size``
  as the "GPU KV cache size" in tokens.
- vLLM starts only if one ``max_model_len`` request fits: the sum over layers of each layer's
  need (``check_enough_kv_cache_memory``).
- With ``--disable-hybrid-kv-cache-manager`` every layer is allocated as full attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .presets import ModelArchitecture


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KvLayout:
    layer_token_bytes: int  # one layer, one token, on this GPU
    full_layers: int  # on this GPU (the largest pipeline stage); a draft model's layers included
    local_layers: int  # 0 when the model has none or the hybrid manager is off
    local_kind: str | None
    local_window: int | None
    block_size: int
    batched_tokens: int  # --max-num-batched-tokens: a local layer keeps the window plus these

    @property
    def layers(self) -> int:
        return self.full_layers + self.local_layers

    @property
    def token_bytes(self) -> int:
        """Bytes one token takes in every layer of this GPU (the pool's page cost per token)."""
        return self.layer_token_bytes * self.layers

    @property
    def page_bytes(self) -> int:
        return self.layer_token_bytes * self.block_size

    def _groups(self) -> tuple[int, int, int]:
        """(group size, full-attention groups, local groups)."""
        counts = [n for n in (self.full_layers, self.local_layers) if n]
        if not counts:
            return 1, 0, 0
        smallest, largest = min(counts), max(counts)
        size = largest if largest < 1.5 * smallest else smallest
        return size, _cdiv(self.full_layers, size), _cdiv(self.local_layers, size)

    def _local_blocks(self, length: int) -> int:
        window = self.local_window or 0
        if self.local_kind == "chunked":
            return _cdiv(min(window + self.batched_tokens, length), self.block_size)
        return _cdiv(min(window - 1 + self.batched_tokens, length), self.block_size) + 1

    def blocks(self, pool_bytes: float) -> int:
        """Whole blocks of the pool (each holds one page of every layer in a group)."""
        group_size, _, _ = self._groups()
        if pool_bytes <= 0:
            return 0
        return math.floor(pool_bytes / (self.page_bytes * group_size))

    def pool_tokens(self, pool_bytes: float) -> int:
        """vLLM's "GPU KV cache size" in tokens."""
        _, full, local = self._groups()
        return self.blocks(pool_bytes) // max(1, full + local) * self.block_size

    def sequence_bytes(self, length: int) -> int:
        """What one request of ``length`` tokens needs: vLLM refuses to start when the pool is
        smaller for ``max_model_len``."""
        blocks = self.full_layers * _cdiv(length, self.block_size)
        if self.local_layers:
            blocks += self.local_layers * self._local_blocks(length)
        return blocks * self.page_bytes

    def sequences(self, pool_bytes: float, length: int) -> int:
        """How many requests of ``length`` tokens the pool holds at once (vLLM's "maximum
        concurrency", rounded down)."""
        _, full, local = self._groups()
        per_request = full * _cdiv(length, self.block_size)
        if local:
            per_request += local * self._local_blocks(length)
        return self.blocks(pool_bytes) // max(1, per_request)

    def longest_sequence(self, pool_bytes: float, limit: int) -> int:
        """The longest length up to ``limit`` whose request fits (``--max-model-len auto``)."""
        low, high = 0, limit
        while low < high:
            middle = (low + high + 1) // 2
            if self.sequence_bytes(middle) <= pool_bytes:
                low = middle
            else:
                high = middle - 1
        return low


def layer_token_bytes(model: ModelArchitecture, kv_element_bytes: float,
                      tensor_parallel: int) -> int:
    """One layer's KV bytes per token on one GPU: the MLA latent (replicated on every rank), or
    K and V of ⌈kv_heads / TP⌉ heads (replicated when TP exceeds the KV heads, so at least one)."""
    if model.kv_lora_rank is not None:
        return round((model.kv_lora_rank + model.qk_rope_head_dim) * kv_element_bytes)
    heads = max(1, math.ceil(model.kv_heads / tensor_parallel))
    return round(2 * heads * model.head_dim * kv_element_bytes)


def kv_layout(model: ModelArchitecture, kv_element_bytes: float, *, tensor_parallel: int = 1,
              pipeline_parallel: int = 1, block_size: int = 16, batched_tokens: int = 0,
              hybrid: bool = True, extra_full_layers: int = 0) -> KvLayout:
    """The layout of ``model`` on one GPU of a TP × PP replica.  ``hybrid=False``: every layer is
    allocated as full attention (``--disable-hybrid-kv-cache-manager``)."""
    local = model.local_layers if hybrid else 0
    full = model.layers - local
    return KvLayout(
        layer_token_bytes=layer_token_bytes(model, kv_element_bytes, tensor_parallel),
        full_layers=math.ceil(full / pipeline_parallel) + extra_full_layers,
        local_layers=math.ceil(local / pipeline_parallel),
        local_kind=model.local_kind if local else None,
        local_window=model.local_window if local else None,
        block_size=block_size, batched_tokens=batched_tokens,
    )
