"""Datasheet ceilings of known GPUs: an ordered table matched by device name.

Each row gives the *dense* peak rate per unit (TFLOP/s; TOP/s for int8), the DRAM bandwidth
(GB/s, 1 GB = 1e9 bytes) and the L2 size, with the document each figure comes from. NVIDIA's
datasheets print tensor-core rates "with sparsity" (2:4 structured) and mark them with an
asterisk; the dense rate, the one a dense kernel can reach, is half of it, and that half is what
the table holds. ``fp32`` is the plain SIMT rate (CUDA cores, no tensor cores), the rate of
elementwise and reduction work as well as of an fp32 GEMM that may not use TF32.

Rows are tried in order and the first pattern that matches wins, so the specific variants
(``H100 NVL``, ``H100 PCIe``) come before the family (``H100``). Patterns use word boundaries:
``GH200`` and ``GB200`` are other products and must not match ``H200`` or ``B200``. Where a
family name alone matches (a name without a form factor), the row is the family's fastest
variant, so the speed of light stays a lower bound.

Not covered: clocks below boost (power or thermal limits), MIG slices (a slice has a fraction
of the SMs and bandwidth; its name still matches the full GPU), fp64, fp6, and any GPU not in
the table: an unknown name gets no ceilings (see ``profile.load_profile``), never a guess.
Measured ceilings (``solforge calibrate``) replace these figures once stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MiB = 1024 * 1024


@dataclass(frozen=True)
class DeviceSpec:
    """One row of the table: a name pattern and the datasheet figures it stands for."""

    pattern: str
    name: str
    peaks_tflops: dict[str, float]
    bandwidth_gbs: float
    l2_bytes: int
    citation: str
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", re.compile(self.pattern, re.IGNORECASE))

    def matches(self, device_name: str) -> bool:
        return self._regex.search(device_name) is not None


def _hopper(fp32: float, sparse_tf32: float, sparse_bf16: float, sparse_fp8: float
            ) -> dict[str, float]:
    # Hopper datasheets list TF32/BF16/FP16/FP8/INT8 tensor rates with sparsity; dense = half.
    return {"fp32": fp32, "tf32": sparse_tf32 / 2, "bf16": sparse_bf16 / 2,
            "fp16": sparse_bf16 / 2, "fp8": sparse_fp8 / 2, "int8": sparse_fp8 / 2}


_H100_DATASHEET = ("NVIDIA H100 Tensor Core GPU datasheet, "
                   "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
                   "; L2 50 MB: NVIDIA H100 Tensor Core GPU Architecture whitepaper, "
                   "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper")
_H200_DATASHEET = ("NVIDIA H200 Tensor Core GPU datasheet, "
                   "https://www.nvidia.com/en-us/data-center/h200/; L2: cudaDeviceProp "
                   "l2CacheSize read 60 MB on an H200 (same GH100 die as the H100)")
_B200_DATASHEET = ("NVIDIA HGX B200 specifications, https://www.nvidia.com/en-us/data-center/hgx/"
                   " (per-GPU rates, sparse; FP32 75 TFLOPS); bandwidth: NVIDIA DGX B200 "
                   "datasheet, 64 TB/s for 8 GPUs, https://www.nvidia.com/en-us/data-center/"
                   "dgx-b200/; L2 126 MB: Chips and Cheese, 'Nvidia's B200: Keeping the CUDA "
                   "Juggernaut Rolling', https://chipsandcheese.com/p/nvidias-b200-keeping-the-"
                   "cuda-juggernaut")
_GB200_DATASHEET = ("NVIDIA GB200 NVL72 specifications, https://www.nvidia.com/en-us/data-center/"
                    "gb200-nvl72/ (per-GPU rates, sparse; FP32 80 TFLOPS; 8 TB/s); L2 as B200")
_A100_DATASHEET = ("NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/"
                   "en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-"
                   "r4-web.pdf (dense figures; sparse ones are twice); L2 40 MB: NVIDIA A100 "
                   "Tensor Core GPU Architecture whitepaper")
# A100 rates are the same for every form factor; only the memory differs.
_A100_PEAKS = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0, "int8": 624.0}

DEVICE_TABLE: tuple[DeviceSpec, ...] = (
    # H100 NVL (94 GB HBM3, 3.9 TB/s): FP32 60, TF32 835*, BF16/FP16 1,671*, FP8/INT8 3,341*.
    DeviceSpec(r"\bH100\b.*\bNVL\b", "NVIDIA H100 NVL", _hopper(60.0, 835.0, 1671.0, 3341.0),
               3900.0, 50 * MiB, _H100_DATASHEET),
    # H100 PCIe (80 GB HBM2e, 2 TB/s): FP32 51, TF32 756*, BF16/FP16 1,513*, FP8/INT8 3,026*.
    DeviceSpec(r"\bH100\b.*\bPCIe\b", "NVIDIA H100 PCIe", _hopper(51.0, 756.0, 1513.0, 3026.0),
               2000.0, 50 * MiB, _H100_DATASHEET),
    # H100 SXM (80 GB HBM3, 3.35 TB/s): FP32 67, TF32 989*, BF16/FP16 1,979*, FP8/INT8 3,958*.
    # PyTorch names it "NVIDIA H100 80GB HBM3".
    DeviceSpec(r"\bH100\b", "NVIDIA H100 SXM", _hopper(67.0, 989.0, 1979.0, 3958.0),
               3350.0, 50 * MiB, _H100_DATASHEET),
    # H200 NVL (141 GB HBM3e, 4.8 TB/s): FP32 60, TF32 835*, BF16/FP16 1,671*, FP8/INT8 3,341*.
    DeviceSpec(r"\bH200\b.*\bNVL\b", "NVIDIA H200 NVL", _hopper(60.0, 835.0, 1671.0, 3341.0),
               4800.0, 60 * MiB, _H200_DATASHEET),
    # H200 SXM (141 GB HBM3e, 4.8 TB/s): FP32 67, TF32 989*, BF16/FP16 1,979*, FP8/INT8 3,958*.
    DeviceSpec(r"\bH200\b", "NVIDIA H200", _hopper(67.0, 989.0, 1979.0, 3958.0),
               4800.0, 60 * MiB, _H200_DATASHEET),
    # GB200 (per GPU): FP4 20 PF*, FP8/INT8 10 PF*, BF16/FP16 5 PF*, TF32 2.5 PF*, FP32 80 TF.
    DeviceSpec(r"\bGB200\b", "NVIDIA GB200",
               {"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0,
                "int8": 5000.0, "fp4": 10000.0}, 8000.0, 126 * MiB, _GB200_DATASHEET),
    # B200 (HGX, per GPU): FP4 18 PF*, FP8/INT8 9 PF*, BF16/FP16 4.5 PF*, TF32 2.2 PF*, FP32 75 TF.
    DeviceSpec(r"\bB200\b", "NVIDIA B200",
               {"fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0,
                "int8": 4500.0, "fp4": 9000.0}, 8000.0, 126 * MiB, _B200_DATASHEET),
    # A100 80GB PCIe: 1,935 GB/s. PyTorch names it "NVIDIA A100 80GB PCIe".
    DeviceSpec(r"\bA100\b.*\b80GB\b.*\bPCIe\b|\bA100\b.*\bPCIe\b.*\b80GB\b",
               "NVIDIA A100 80GB PCIe", _A100_PEAKS, 1935.0, 40 * MiB, _A100_DATASHEET),
    # A100 40GB, PCIe or SXM4: 1,555 GB/s ("NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-40GB").
    DeviceSpec(r"\bA100\b.*(\bPCIe\b|\b40GB\b)", "NVIDIA A100 40GB", _A100_PEAKS, 1555.0,
               40 * MiB, _A100_DATASHEET),
    # A100 SXM4 80GB: 2,039 GB/s ("NVIDIA A100-SXM4-80GB"); the family's fastest, so the default.
    DeviceSpec(r"\bA100\b", "NVIDIA A100 SXM4 80GB", _A100_PEAKS, 2039.0, 40 * MiB,
               _A100_DATASHEET),
    # L40S (48 GB GDDR6, 864 GB/s): FP32 91.6, TF32 183 (366*), BF16/FP16 362.05 (733*),
    # FP8/INT8 733 (1,466*); L2 96 MB.
    DeviceSpec(r"\bL40S\b", "NVIDIA L40S",
               {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0,
                "int8": 733.0}, 864.0, 96 * MiB,
               "NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/"),
    # RTX 4090 (24 GB GDDR6X, 1,008 GB/s, L2 72 MB): FP32 82.6; tensor rates with FP32
    # accumulation (GeForce runs FP32-accumulate at half the FP16-accumulate rate, and PyTorch's
    # GEMMs accumulate in FP32): TF32 82.6, BF16/FP16 165.2, FP8 330.3; INT8 660.6.
    DeviceSpec(r"\bRTX 4090\b", "NVIDIA GeForce RTX 4090",
               {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3,
                "int8": 660.6}, 1008.0, 72 * MiB,
               "NVIDIA Ada GPU Architecture whitepaper, appendix table (GeForce RTX 4090), "
               "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-"
               "architecture.pdf"),
)


def match_device(device_name: str) -> DeviceSpec | None:
    """The first table row whose pattern matches ``device_name``, or None."""
    for spec in DEVICE_TABLE:
        if spec.matches(device_name):
            return spec
    return None
