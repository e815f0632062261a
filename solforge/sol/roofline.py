"""Speed-of-light time (the roofline), the SOL score, and the faster-than-light check.

T_SOL = max(tensor FLOPs / peak of the unit the precision class admits,
            vector FLOPs / fp32 SIMT peak,
            bytes / DRAM bandwidth)

A lower bound on any implementation's time, hence the max of the parts and not their sum
(NVIDIA's SOLAR takes runtime = max(compute, memory) the same way). The SOL score is
SOL-ExecBench's (``sol_score.py``): S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)).

Not covered: overlap limits (a real kernel rarely reaches both ceilings at once), on-chip
bandwidth (shared memory, L2) and latency bounds other than the empty-kernel floor, and exact
fp32 GEMMs emulated on tensor cores (3xTF32 and the like): an exact-fp32 problem is bounded by
the SIMT rate, which such a kernel can beat by up to about 2.5x on Hopper.
"""

from __future__ import annotations

import math

from solforge.problems.precision import PrecisionClass, get_precision
from solforge.sol.profile import DeviceProfile
from solforge.sol.work import Work

# When a device lacks the unit a precision class admits, its GEMMs run on the next unit the
# device has, in this order (e.g. an fp8 problem on an A100 runs on bf16/fp16 tensor cores).
_FALLBACK: dict[str, tuple[str, ...]] = {
    "fp4": ("fp4", "fp8", "bf16", "fp16", "tf32", "fp32"),
    "fp8": ("fp8", "bf16", "fp16", "tf32", "fp32"),
    "int8": ("int8", "fp8", "bf16", "fp16", "tf32", "fp32"),
    "bf16": ("bf16", "fp16", "tf32", "fp32"),
    "fp16": ("fp16", "bf16", "tf32", "fp32"),
    "tf32": ("tf32", "fp32"),
    "fp32": ("fp32",),
}

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
    """(unit, TFLOP/s) the tensor FLOPs of ``precision`` are bounded by on ``profile``."""
    unit = tensor_unit(precision)
    for candidate in _FALLBACK.get(unit, (unit, "fp32")):
        rate = profile.peak(candidate)
        if rate is not None:
            return candidate, rate
    raise ValueError(f"device profile {profile.name!r} has no rate for unit {unit!r} "
                     f"nor a fallback for it; re-run `solforge calibrate`")


def compute_time(work: Work, profile: DeviceProfile, precision: PrecisionClass | str) -> float:
    """The compute term of T_SOL alone, in ms: what no kernel beats even with every byte
    already in cache (the larger of tensor FLOPs at the tensor peak and vector FLOPs at
    the fp32 SIMT peak)."""
    compute_ms = 0.0
    if work.tensor_flops > 0:
        compute_ms = work.tensor_flops / (tensor_peak(profile, precision)[1] * 1e9)
    if work.vector_flops > 0:
        simt = profile.peak("fp32")
        if simt is None:
            raise ValueError(f"device profile {profile.name!r} has no fp32 rate")
        compute_ms = max(compute_ms, work.vector_flops / (simt * 1e9))
    return compute_ms


def sol_time(work: Work, profile: DeviceProfile, precision: PrecisionClass | str
             ) -> tuple[float, str]:
    """(T_SOL in ms, bound): bound is 'memory' if the bytes term is the largest, else
    'compute'. ``precision`` is a precision class, its name, or a unit name (``Problem.unit``:
    a problem may name a unit other than its class's). Milliseconds: FLOPs / (TFLOP/s * 1e9),
    bytes / (GB/s * 1e6)."""
    compute_ms = compute_time(work, profile, precision)
    memory_ms = work.bytes / (profile.bandwidth_gbs * 1e6)
    if memory_ms >= compute_ms:
        return memory_ms, "memory"
    return compute_ms, "compute"


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
