"""Deployment principles as checks: the GPU memory budget (Principle 2) and the release lints.

Pure code: no Kubernetes, HTTP, asyncio or clock.  The operator calls :func:`lint_manifest` (or
:func:`lint_release`) to set the ``Valid`` condition; the CLI calls it offline.
"""

from .args import SpeculativeConfig, VllmArgs, VllmArgsError, parse_vllm_args
from .facts import ManifestError, MetricFact, ReleaseFacts, facts_from_manifest, model_from_spec
from .findings import Finding, Severity
from .gpu import GpuSpec, UnknownGpuError, gpu_from_label
from .kv import KvLayout, kv_layout
from .lint import LintResult, lint_manifest, lint_release
from .memory import MemoryBudget, compute_budget, kv_bytes_per_token
from .presets import PRESETS, ModelArchitecture, get_preset, preset_for_model

__all__ = [
    "PRESETS",
    "Finding",
    "GpuSpec",
    "KvLayout",
    "LintResult",
    "ManifestError",
    "MemoryBudget",
    "MetricFact",
    "ModelArchitecture",
    "ReleaseFacts",
    "Severity",
    "SpeculativeConfig",
    "UnknownGpuError",
    "VllmArgs",
    "VllmArgsError",
    "compute_budget",
    "facts_from_manifest",
    "get_preset",
    "gpu_from_label",
    "kv_bytes_per_token",
    "kv_layout",
    "lint_manifest",
    "lint_release",
    "model_from_spec",
    "parse_vllm_args",
    "preset_for_model",
]
