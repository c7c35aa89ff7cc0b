"""Byte units and vLLM's human-readable integers (``32k``, ``1K``, ``25.6k``)."""

from __future__ import annotations

import re

KIB = 1024
GIB = 1024**3

# vLLM's convention (vllm.engine.arg_utils.human_readable_int): lowercase suffixes are decimal
# (1k = 1000), uppercase ones binary (1K = 1024), and decimals are allowed only with decimal ones.
_DECIMAL_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY_SUFFIX = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")


def parse_human_int(text: str) -> int:
    """``"4096"`` → 4096, ``"32k"`` → 32000, ``"32K"`` → 32768; ValueError otherwise."""
    value = text.strip()
    match = _HUMAN_INT.fullmatch(value)
    if match is None:
        return int(value)
    number, suffix = match.groups()
    if suffix in _DECIMAL_SUFFIX:
        return int(float(number) * _DECIMAL_SUFFIX[suffix])
    if "." in number:
        raise ValueError(f"decimals are not allowed with the binary suffix {suffix!r}")
    return int(number) * _BINARY_SUFFIX[suffix]


def gib(n_bytes: float) -> float:
    return n_bytes / GIB
