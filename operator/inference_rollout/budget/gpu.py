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


# A MIG slice is a GPU of its own size: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb → 5 GB.
_MIG_SLICE = re.compile(r"MIG-\d+G\.(\d+)GB", re.IGNORECASE)
_SIZE_IN_NAME = re.compile(r"(?<![A-Z0-9])(\d+)GB?(?![A-Z0-9])", re.IGNORECASE)
_MIB = 1 / 1024  # GiB per MiB
_DECIMAL_GB = 1e9 / 2**30  # GiB per GB

# Known products as tokens of the label (the more specific first), the nominal size the label
# may carry to tell variants apart (None: any), and memory.total in MiB as the driver reports it.
# GH200's label says 480GB: that counts the CPU's memory; the GPU has 96 GB of HBM3.
_MEMORY_MIB_BY_TOKENS: tuple[tuple[frozenset[str], int | None, int], ...] = (
    (frozenset({"GH200"}), None, 97_871),
    (frozenset({"H100", "NVL"}), None, 95_830),
    (frozenset({"H100"}), None, 81_559),
    (frozenset({"H800"}), None, 81_559),
    (frozenset({"H200"}), None, 143_771),
    (frozenset({"H20"}), None, 97_871),
    (frozenset({"B200"}), None, 183_359),
    (frozenset({"A100"}), 80, 81_920),
    (frozenset({"A100"}), None, 40_960),  # the 80 GB variants always say 80GB
    (frozenset({"A800"}), None, 81_920),
    (frozenset({"L40S"}), None, 46_068),
    (frozenset({"L40"}), None, 46_068),
    (frozenset({"L4"}), None, 23_034),
    (frozenset({"A10G"}), None, 23_028),
    (frozenset({"A10"}), None, 23_028),
    (frozenset({"A30"}), None, 24_576),
    (frozenset({"A40"}), None, 46_068),
    (frozenset({"A6000"}), None, 49_140),
    (frozenset({"6000", "ADA"}), None, 49_140),
    (frozenset({"T4"}), None, 15_360),
    (frozenset({"V100"}), 32, 32_768),
    (frozenset({"V100"}), None, 16_384),
    (frozenset({"4090"}), None, 24_564),
    (frozenset({"3090"}), None, 24_576),
    (frozenset({"MI300X"}), None, 196_592),
    (frozenset({"MI325X"}), None, 262_128),
)


def gpu_from_label(label: str) -> GpuSpec:
    """The memory of the GPU a product label names; UnknownGpuError when it names none we know."""
    text = label.strip()
    mig = _MIG_SLICE.search(text)
    if mig:
        return GpuSpec(round(int(mig.group(1)) * _DECIMAL_GB, 2), text)
    tokens = frozenset(re.split(r"[-_\s]+", text.upper()))
    size_match = _SIZE_IN_NAME.search(text) if "GH200" not in tokens else None
    size = int(size_match.group(1)) if size_match else None
    for required, nominal, memory_mib in _MEMORY_MIB_BY_TOKENS:
        if required <= tokens and nominal in (None, size):
            return GpuSpec(round(memory_mib * _MIB, 2), text)
    if size is not None:
        return GpuSpec(round(size * _DECIMAL_GB, 2), text)
    raise UnknownGpuError(
        f"cannot tell the memory of GPU product {text!r}; set spec.model.gpuMemoryGiB"
    )
