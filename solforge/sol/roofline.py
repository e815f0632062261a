"""Speed-of-light time (the roofline), the SOL score, and the faster-than-light check.

T_SOL = max(tensor FLOPs on the matrix units / the rate of the unit each part may use,
            tensor FLOPs on the SIMT units (fp32) / the fp32 SIMT peak,
            vector FLOPs / fp32 SIMT peak,
            bytes / DRAM bandwidth)

A lower bound on any implementation's time, hence the max of the parts and not their sum
(NVIDIA's SOLAR takes runtime = max(compute, memory) the same way); only work that shares
one resource adds up (tensor FLOPs bounded at different tensor-core units run one after the
other on the same tensor cores). The SOL score is SOL-ExecBench's (``sol_score.py``):
S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)).

The unit of each part of the tensor work (:func:`tensor_terms`) is the fastest of: the units
PyTorch's own kernels may use for that op family and data type under the settings in force
(``units.py``: TF32 for cuDNN's fp32 convolutions by default), the unit the problem admits (its
precision class, or its ``sol_unit``), and the fp32 SIMT rate: bounded at the fp32 SIMT rate
alone, KernelBench level 2's ``1_Conv2D_ReLU_BiasAdd`` (fp32) had a 5.85 ms bound under an
honest 1.63 ms torch.compile baseline on cuDNN's TF32 kernels
(benchmarks/results/2026-12-03-h200-s12). Tensor FLOPs no part accounts for (a declared count)
are bounded at the fastest unit any of the counted parts may use, or, with no parts at all, any
op family on fp32 data.

On a GPU, fp32 tensor work may also run at fp32 accuracy on the tensor cores, as three TF32
products per product (3xTF32, a third of the TF32 rate: about 139 TFLOP/s on an H100
against 54 for the fp32 SIMT units), where PyTorch's own fp32 GEMMs do not (cuBLAS with
TF32 off): that unit is one of the choices for every fp32 part, so an exact-fp32 problem's
GEMMs are bounded at it, and a kernel that uses it (``kernels/triton/gemm_f32x3.py``) is
not faster than light (bounded at the SIMT rate, such a kernel could beat the bound by up
to 2.6x on Hopper).

Not covered: overlap limits (a real kernel rarely reaches both ceilings at once), on-chip
bandwidth (shared memory, L2) and latency bounds other than the empty-kernel floor, fp32
emulations with fewer products than 3xTF32 at fp32-level error (none is known on Hopper;
Blackwell's BF16x9 emulation is not modelled), and packed 16-bit SIMT
arithmetic (vector work is bounded at the fp32 rate; Hopper's bf16x2 rate is twice that,
which matters only where vector work, not memory, binds).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from solforge.problems.precision import PrecisionClass, get_precision
from solforge.sol.profile import DeviceProfile
from solforge.sol.units import (
    FAMILIES,
    TF32X3,
    MathFlags,
    UnitChoice,
    library_units,
    read_math_flags,
)
from solforge.sol.work import TensorPart, Work

# When a device lacks the unit a precision class admits, its GEMMs run on the next unit the
# device has, in this order (e.g. an fp8 problem on an A100 runs on bf16/fp16 tensor cores).
_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "fp8", "bf16", "fp16", "tf32", "fp32"),
    "fp8": ("fp8", "bf16", "fp16", "tf32", "fp32"),
    "int8": ("int8", "fp8", "bf16", "fp16", "tf32", "fp32"),
    "bf16": ("bf16", "fp16", "tf32", "fp32"),
    "fp16": ("fp16", "bf16", "tf32", "fp32"),
    "tf32": ("tf32", "fp32"),
    TF32X3: (TF32X3, "fp32"),
    "fp32": ("fp32",),
}
# Units whose rate follows from a measured one: three TF32 products per fp32 product.
_DERIVED = {TF32X3: ("tf32", 1 / 3)}


class TensorTerm(NamedTuple):
    """Tensor FLOPs bounded at one unit: what they are, the unit, its rate, and why."""

    what: str  # "conv float32", "matmul bfloat16", or "declared (conv float16)"
    flops: float
    unit: str  # the unit as found on the profile (after any fallback)
    tflops: float
    why: str

    @property
    def ms(self) -> float:
        return self.flops / (self.tflops * 1e9)


# fp32 tensor work at fp32 accuracy on a GPU's tensor cores: three TF32 products each
EMULATED_FP32 = ("fp32 products at fp32 accuracy as three TF32 products (3xTF32: CUTLASS's "
                 "OpMultiplyAddFastF32, Triton's tf32x3, kernels/triton/gemm_f32x3.py)")

# faster_than_sol: a kernel below this fraction of T_SOL is impossible, not just fast. The
# margin absorbs counting error (a reference that does more than the task needs, a
# declared count that is slightly high) and clocks above the datasheet's boost.
IMPOSSIBLE_FRACTION = 0.5


def tensor_unit(precision: PrecisionClass | str) -> str:
    """The unit GEMMs may use: a unit name (``Problem.unit``) as given; for a precision class
    (or its name), its ``unit``, or tf32 where the class allows TF32."""
    if isinstance(precision, str):
        if precision in _FALLBACK:
            return precision
        precision = get_precision(precision)
    return "tf32" if precision.unit == "fp32" and precision.allow_tf32 else precision.unit


def tensor_peak(profile: DeviceProfile, precision: PrecisionClass | str) -> tuple[str, float]:
    """(unit, TFLOP/s) the precision class's own unit gives on ``profile`` (after fallback)."""
    unit = tensor_unit(precision)
    found = _resolve(profile, unit)
    if found is None:
        raise ValueError(f"device profile {profile.name!r} has no rate for unit {unit!r} "
                         f"nor a fallback for it; re-run `solforge calibrate`")
    return found


def tensor_terms(work: Work, profile: DeviceProfile, precision: PrecisionClass | str,
                 flags: MathFlags | None = None) -> list[TensorTerm]:
    """The tensor FLOPs of ``work`` as terms, each at the fastest unit it may use on
    ``profile`` (module docstring). ``flags``: PyTorch's math settings, read now if None."""
    if work.tensor_flops <= 0:
        return []
    flags = flags or read_math_flags()
    admitted = tensor_unit(precision)
    gpu = profile.name != "cpu"

    def best(part: TensorPart) -> tuple[str, float, str]:
        choices = (*library_units(part.family, part.dtype, flags, gpu),
                   UnitChoice(admitted, f"the problem admits {admitted}"),
                   *((UnitChoice(TF32X3, EMULATED_FP32),)
                     if gpu and part.dtype.removeprefix("torch.") == "float32" else ()),
                   UnitChoice("fp32", "the fp32 SIMT rate"))
        found = [(*rate, c.why) for c in choices if (rate := _resolve(profile, c.unit))]
        if not found:
            raise ValueError(f"device profile {profile.name!r} has no fp32 rate")
        return max(found, key=lambda f: f[1])  # the first of equal rates names the reason

    terms = [TensorTerm(f"{p.family} {p.dtype}", p.flops, *best(p))
             for p in work.tensor if p.flops > 0]
    if work.unattributed_flops > 0:
        parts = work.tensor or tuple(TensorPart(family=f, dtype="float32") for f in FAMILIES)
        unit, rate, why = max((best(p) for p in parts), key=lambda f: f[1])
        kinds = ", ".join(dict.fromkeys(f"{p.family} {p.dtype}" for p in parts))
        what = f"declared ({kinds})" if work.tensor else "unattributed (any op on float32)"
        terms.append(TensorTerm(what, work.unattributed_flops, unit, rate,
                                f"{why}; the fastest unit of {kinds}"))
    return terms


def compute_time(work: Work, profile: DeviceProfile, precision: PrecisionClass | str,
                 flags: MathFlags | None = None) -> float:
    """The compute term of T_SOL alone, in ms: what no kernel beats even with every byte
    already in cache (the largest of the tensor-core terms' sum, the SIMT GEMM terms' sum
    and the vector FLOPs at the fp32 SIMT peak)."""
    terms = tensor_terms(work, profile, precision, flags)
    matrix_ms = sum(t.ms for t in terms if t.unit != "fp32")
    compute_ms = max(matrix_ms, sum(t.ms for t in terms if t.unit == "fp32"))
    if work.vector_flops > 0:
        simt = profile.peak("fp32")
        if simt is None:
            raise ValueError(f"device profile {profile.name!r} has no fp32 rate")
        compute_ms = max(compute_ms, work.vector_flops / (simt * 1e9))
    return compute_ms


def sol_time(work: Work, profile: DeviceProfile, precision: PrecisionClass | str,
             flags: MathFlags | None = None) -> tuple[float, str]:
    """(T_SOL in ms, bound): bound is 'memory' if the bytes term is the largest, else
    'compute'. ``precision`` is a precision class, its name, or a unit name (``Problem.unit``:
    a problem may name a unit other than its class's); ``flags`` PyTorch's math settings
    (read now if None). Milliseconds: FLOPs / (TFLOP/s * 1e9), bytes / (GB/s * 1e6)."""
    compute_ms = compute_time(work, profile, precision, flags)
    memory_ms = work.bytes / (profile.bandwidth_gbs * 1e6)
    if memory_ms >= compute_ms:
        return memory_ms, "memory"
    return compute_ms, "compute"


def _resolve(profile: DeviceProfile, unit: str) -> tuple[str, float] | None:
    """(unit, TFLOP/s) of ``unit`` on ``profile``, or of the next unit it has (``_FALLBACK``)."""
    for candidate in _FALLBACK.get(unit, (unit, "fp32")):
        base, factor = _DERIVED.get(candidate, (candidate, 1.0))
        rate = profile.peak(base)
        if rate is not None:
            return candidate, rate * factor
    return None


def sol_score(t_k: float, t_b: float, t_sol: float) -> float:
    """SOL-ExecBench's score in [0, 1]: 0.5 when the kernel ties the baseline (T_k = T_b),
    1 at the speed of light (T_k <= T_SOL). If the baseline is already at or below T_SOL,
    the score is 1 at or below T_SOL and 0 above it."""
    for label, v in (("t_k", t_k), ("t_b", t_b), ("t_sol", t_sol)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"sol_score: {label} must be a finite time >= 0, got {v!r}")
    if t_k <= t_sol:
        return 1.0
    if t_b <= t_sol:
        return 0.0
    s = 1.0 / (1.0 + (t_k - t_sol) / (t_b - t_sol))
    return min(1.0, max(0.0, s))


def faster_than_sol(t_k: float | None, sol_ms: float | None, data_bytes: float | None,
                    llc_bytes: int | None, compute_ms: float | None = None) -> bool:
    """True when the kernel time is physically impossible: under half the roofline on a
    workload whose data cannot sit in the last-level cache (``data_bytes > llc_bytes``), or,
    whatever the data's size, under half the compute term alone (``compute_ms``: FLOPs at
    the peak; a warm cache speeds up loads, never arithmetic). Anything unknown (a missing
    time, SOL or cache size) is never flagged by the rule that needs it."""
    if t_k is None:
        return False
    if compute_ms is not None and compute_ms > 0 and t_k < IMPOSSIBLE_FRACTION * compute_ms:
        return True
    if sol_ms is None or data_bytes is None or llc_bytes is None:
        return False
    return data_bytes > llc_bytes and t_k < IMPOSSIBLE_FRACTION * sol_ms
