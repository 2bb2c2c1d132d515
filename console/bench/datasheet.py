"""NVIDIA's datasheet figures for the GPU models people bench, and what a bench can reach.

Figures are per GPU, dense (NVIDIA's tables give tensor figures *with sparsity*; dense is half
of that, as their footnotes say), in TFLOP/s and TB/s (1e12 bytes/s), and the PCIe generation
of the GPU's host link. Sources (read 2025):

- H100 SXM5 / PCIe / NVL: https://www.nvidia.com/en-us/data-center/h100/ (datasheet
  https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)
- H200 SXM / NVL: https://www.nvidia.com/en-us/data-center/h200/
- A100 40/80 GB SXM4 and PCIe:
  https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
- L40S: https://www.nvidia.com/en-us/data-center/l40s/
- L4: https://www.nvidia.com/en-us/data-center/l4/
- A10: https://www.nvidia.com/en-us/data-center/products/a10-gpu/
- GeForce RTX 4090 (BF16 with FP32 accumulate, as PyTorch's matmul accumulates): the Ada
  architecture whitepaper, appendix table,
  https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf
- B200 (HGX B200, per GPU): https://www.nvidia.com/en-us/data-center/hgx/

What a bench reaches (:data:`ACHIEVABLE`): a large cuBLAS matmul gets ~70-85 % of the dense
tensor peak (clocks under the power limit sit below the boost clock the peak assumes; one H200
measured 790 of 989 TFLOP/s bf16 with PyTorch, 80 %); a device copy gets ~85-92 % of the HBM
figure counted as bytes read + written (that H200: 4.3 of 4.8 TB/s); pinned host <-> device
copies get ~80-90 % of the link's rate per direction (:func:`pcie_gbps`). A GPU is flagged
below the datasheet when it is more than :data:`SLACK` below these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Fraction of the datasheet figure a healthy GPU reaches in this bench, per metric.
ACHIEVABLE = {"bf16": 0.75, "fp8": 0.60, "copy": 0.85, "pcie": 0.75}
#: How far below the achievable figure (fraction) counts as slow.
SLACK = 0.10


@dataclass(frozen=True)
class Datasheet:
    """One model's figures (dense, per GPU).

    Attributes:
        model: the model's name as gpuconsole shows it.
        bf16_tflops: dense BF16 tensor TFLOP/s.
        fp8_tflops: dense FP8 tensor TFLOP/s, or ``None`` (no FP8 tensor cores).
        mem_tbps: memory bandwidth, TB/s.
        pcie_gen: the host link's PCIe generation (x16).
        source: the page the figures are from.
    """

    model: str
    bf16_tflops: float
    fp8_tflops: float | None
    mem_tbps: float
    pcie_gen: int
    source: str


_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_A100 = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"

#: (pattern over NVML's name, lower case) -> figures; the first pattern that matches wins, so
#: the specific names come before the general ones.
TABLE: tuple[tuple[str, Datasheet], ...] = (
    (r"h200 nvl", Datasheet("H200 NVL", 835.5, 1671.0, 4.8, 5, _H200)),
    (r"h200", Datasheet("H200 SXM", 989.4, 1978.9, 4.8, 5, _H200)),
    (r"h100 nvl", Datasheet("H100 NVL", 835.5, 1670.5, 3.9, 5, _H100)),
    (r"h100 pcie", Datasheet("H100 PCIe", 756.5, 1513.0, 2.0, 5, _H100)),
    (r"h100", Datasheet("H100 SXM", 989.4, 1978.9, 3.35, 5, _H100)),
    (r"a100.*sxm.*80|a100.*80gb.*sxm", Datasheet("A100 SXM 80GB", 312.0, None, 2.039, 4, _A100)),
    (r"a100.*sxm", Datasheet("A100 SXM 40GB", 312.0, None, 1.555, 4, _A100)),
    (r"a100.*80gb.*pcie|a100.*pcie.*80", Datasheet("A100 PCIe 80GB", 312.0, None, 1.935, 4, _A100)),
    (r"a100", Datasheet("A100 PCIe 40GB", 312.0, None, 1.555, 4, _A100)),
    (
        r"l40s",
        Datasheet(
            "L40S", 362.05, 733.0, 0.864, 4, "https://www.nvidia.com/en-us/data-center/l40s/"
        ),
    ),
    (
        r"\bl4\b",
        Datasheet("L4", 121.0, 242.5, 0.3, 4, "https://www.nvidia.com/en-us/data-center/l4/"),
    ),
    (
        r"\ba10\b",
        Datasheet(
            "A10",
            125.0,
            None,
            0.6,
            4,
            "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        ),
    ),
    (r"rtx 4090", Datasheet("RTX 4090", 165.2, 330.3, 1.008, 4, _ADA)),
    (
        r"b200",
        Datasheet("B200", 2250.0, 4500.0, 8.0, 5, "https://www.nvidia.com/en-us/data-center/hgx/"),
    ),
)

#: GB/s per lane and direction of each PCIe generation after line coding (128b/130b from
#: gen 3; gen 6 FLIT, figure of PCI-SIG's 64 GT/s): x16 gen 4 = 31.5, gen 5 = 63.0.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def lookup(name: str | None) -> Datasheet | None:
    """The figures of an NVML GPU name (``NVIDIA H100 80GB HBM3``), or ``None`` when the model
    is not in :data:`TABLE` (then only the fleet median judges it)."""
    if not name:
        return None
    low = name.lower()
    for pattern, sheet in TABLE:
        if re.search(pattern, low):
            return sheet
    return None


def pcie_gbps(gen: int | float | None, width: int | float | None) -> float | None:
    """A PCIe link's rate per direction (GB/s) at generation ``gen`` and ``width`` lanes, or
    ``None`` when either is unknown."""
    if gen is None or width is None or int(gen) not in PCIE_LANE_GBPS:
        return None
    return PCIE_LANE_GBPS[int(gen)] * float(width)


def achievable(sheet: Datasheet, metric: str) -> float | None:
    """What a healthy GPU of ``sheet``'s model reaches in this bench: TFLOP/s for ``bf16`` and
    ``fp8``, GB/s (read + written) for ``copy``; ``None`` when the model has no such figure."""
    if metric == "bf16":
        return sheet.bf16_tflops * ACHIEVABLE["bf16"]
    if metric == "fp8":
        return None if sheet.fp8_tflops is None else sheet.fp8_tflops * ACHIEVABLE["fp8"]
    if metric == "copy":
        return sheet.mem_tbps * 1000.0 * ACHIEVABLE["copy"]
    return None
