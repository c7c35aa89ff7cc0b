"""One GPU's memory, given explicitly or read from a node label of the GPU product.

Labels come from NVIDIA GPU feature discovery (``nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3``),
GKE (``cloud.google.com/gke-accelerator: nvidia-l4``), Karpenter on AWS
(``karpenter.k8s.aws/instance-gpu-name: a10g``) or AMD's device plugin
(``amd.com/gpu.product-name: AMD_Instinct_MI300X``).  Sizes are nominal (the product's GB, read as
GiB); CUDA reports 1-6% less, so set ``spec.model.gpuMemoryGiB`` to ``nvidia-smi``'s
``memory.total`` when the margin matters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GPU_PRODUCT_LABELS = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "karpenter.k8s.aws/instance-gpu-name",
    "amd.com/gpu.product-name",
)


@dataclass(frozen=True)
class GpuSpec:
    memory_gib: float  # one GPU
    product: str | None = None  # the label value it came from, if any

    def __post_init__(self) -> None:
        if not self.memory_gib > 0:
            raise ValueError(f"GPU memory must be positive, got {self.memory_gib} GiB")


class UnknownGpuError(ValueError):
    pass


# A MIG slice is a GPU of its own size: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb → 5.
_MIG_SLICE = re.compile(r"MIG-\d+G\.(\d+)GB", re.IGNORECASE)
_SIZE_IN_NAME = re.compile(r"(?<![A-Z0-9])(\d+)GB?(?![A-Z0-9])", re.IGNORECASE)

# Products whose label carries no size, as tokens of the label; the more specific entries first.
# GH200 comes before the size rule: its "480GB" counts CPU memory, the GPU has 96 GB of HBM3.
_MEMORY_GIB_BY_TOKENS: tuple[tuple[frozenset[str], float], ...] = (
    (frozenset({"GH200"}), 96),
    (frozenset({"H100", "NVL"}), 94),
    (frozenset({"H100"}), 80),
    (frozenset({"H800"}), 80),
    (frozenset({"H200"}), 141),
    (frozenset({"H20"}), 96),
    (frozenset({"B200"}), 180),
    (frozenset({"A100"}), 40),  # the 80 GB variants always say 80GB
    (frozenset({"A800"}), 80),
    (frozenset({"L40S"}), 48),
    (frozenset({"L40"}), 48),
    (frozenset({"L4"}), 24),
    (frozenset({"A10G"}), 24),
    (frozenset({"A10"}), 24),
    (frozenset({"A30"}), 24),
    (frozenset({"A40"}), 48),
    (frozenset({"A6000"}), 48),
    (frozenset({"6000", "ADA"}), 48),
    (frozenset({"T4"}), 16),
    (frozenset({"V100"}), 16),
    (frozenset({"4090"}), 24),
    (frozenset({"3090"}), 24),
    (frozenset({"MI300X"}), 192),
    (frozenset({"MI325X"}), 256),
)


def gpu_from_label(label: str) -> GpuSpec:
    """The memory of the GPU a product label names; UnknownGpuError when it names none we know."""
    text = label.strip()
    mig = _MIG_SLICE.search(text)
    if mig:
        return GpuSpec(float(mig.group(1)), text)
    tokens = frozenset(re.split(r"[-_\s]+", text.upper()))
    if "GH200" not in tokens:
        size = _SIZE_IN_NAME.search(text)
        if size:
            return GpuSpec(float(size.group(1)), text)
    for required, memory_gib in _MEMORY_GIB_BY_TOKENS:
        if required <= tokens:
            return GpuSpec(memory_gib, text)
    raise UnknownGpuError(
        f"cannot tell the memory of GPU product {text!r}; set spec.model.gpuMemoryGiB"
    )
