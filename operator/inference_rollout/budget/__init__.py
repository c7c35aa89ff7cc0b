"""Deployment principles as checks: the GPU memory budget (Principle 2) and the release lints.

Pure code: no Kubernetes, HTTP, asyncio or clock.
"""

from .args import SpeculativeConfig, VllmArgs, VllmArgsError, parse_vllm_args
from .findings import Finding, Severity
from .gpu import GpuSpec, UnknownGpuError, gpu_from_label
from .memory import MemoryBudget, compute_budget, kv_bytes_per_token
from .presets import PRESETS, ModelArchitecture, get_preset, preset_for_model

__all__ = [
    "PRESETS",
    "Finding",
    "GpuSpec",
    "MemoryBudget",
    "ModelArchitecture",
    "Severity",
    "SpeculativeConfig",
    "UnknownGpuError",
    "VllmArgs",
    "VllmArgsError",
    "compute_budget",
    "get_preset",
    "gpu_from_label",
    "kv_bytes_per_token",
    "parse_vllm_args",
    "preset_for_model",
]
