"""Precision classes: one name decides both the tolerance and the hardware unit.

A problem declares one precision class. The evaluator reads its tolerance to judge
correctness; the speed-of-light code reads ``unit``, the fastest unit the class admits
(an fp32 problem that admits TF32 is scored against the TF32 tensor-core rate), and takes
the faster of it and the unit PyTorch's own settings give each op (``solforge/sol/units.py``:
cuDNN runs fp32 convolutions on TF32 by default, so an exact-fp32 problem's convolutions are
bounded at TF32 too). A class never makes an op's bound slower than PyTorch's default.

Tolerances follow the public anchors: KernelBench uses 1e-4 for fp32 and 1e-2 for
fp16/bf16; SOL-ExecBench defaults to atol = rtol = 1e-2 with a matched ratio of 0.99.
FP8 (e4m3) has three mantissa bits, so one rounding step is 2**-3 = 12.5% relative: an
fp8-typed output tolerates one step, and an int8-typed output one code, whatever the
class (:func:`output_tolerance`); the class's own atol/rtol hold every other output (the
scales, the bf16 result of an fp8 GEMM). An element passes when
|out - ref| <= atol + rtol * |ref| (+ rms_atol * rms(ref), where a class sets it).

Gradient classes (``bf16_grad``, ``fp32_grad``) judge each output against its own scale:
``rms_atol`` is an absolute tolerance in units of the output's root-mean-square, and their
fixed ``atol`` is tiny. Gradients have no natural unit (dlogits of a mean loss over 4096
tokens are ~1e-7 to 1e-4; a weight gradient summed over 16k tokens is ~100), so a fixed
atol of 2e-2 would pass "return zeros" on the first and mean nothing on the second. And a
weight gradient is a sum over thousands of tokens of products that the reference keeps in
fp32 and an honest kernel may round to bf16 first (PyTorch's own eager backward does, op
by op): each term then carries ~0.4% error and the sum's error is ~0.4% of the sum's
typical size, however small one element is; 2% of the output's RMS (5 sigma of that
error) passes it and still fails a kernel that accumulates the sum in bf16.

Not covered: per-output tolerances chosen by the problem, and ULP-based comparison.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PrecisionClass(BaseModel):
    """How exact a problem's outputs must be, and which unit may compute them."""

    model_config = ConfigDict(frozen=True)

    name: str
    atol: float = Field(description="absolute tolerance per element")
    rtol: float = Field(description="relative tolerance per element")
    matched_ratio: float = Field(
        1.0, description="fraction of elements that must pass (1.0: every element)"
    )
    worst_error_factor: float = Field(
        float("inf"),
        description="no element may exceed this multiple of its tolerance, even when the "
        "matched ratio lets some fail",
    )
    unit: str = Field(
        description="the fastest hardware unit the class admits for the SOL bound: fp32, "
        "tf32, bf16, fp16, fp8, int8 (an op PyTorch's settings run on a faster unit is "
        "bounded at that one: solforge/sol/units.py)"
    )
    allow_tf32: bool = Field(
        False, description="solutions may run fp32 matmul/conv on TF32 tensor cores"
    )
    rms_atol: float = Field(
        0.0, description="absolute tolerance in units of the reference output's RMS (over "
        "its finite elements): for gradients that are long sums (weight gradients)"
    )
    max_abs_cap: float | None = Field(
        None, description="no element's absolute error may exceed this, whatever the "
        "matched ratio allows (SOL-ExecBench's max_error_cap)"
    )
    reject_nonfinite: bool = Field(
        False, description="any NaN or infinity in either result fails, even where both "
        "have it (SOL-ExecBench's rule); False: they must sit where the reference's do"
    )
    allow_negative_inf: bool = Field(
        False, description="with reject_nonfinite, -inf where both results have it passes"
    )
    description: str = ""


_REGISTRY: dict[str, PrecisionClass] = {}


def register_precision(pc: PrecisionClass) -> PrecisionClass:
    """Add a precision class (built-ins and plug-ins use this same door)."""
    _REGISTRY[pc.name] = pc
    return pc


def get_precision(name: str) -> PrecisionClass:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ValueError(f"unknown precision class {name!r}; use one of: {known}") from None


register_precision(PrecisionClass(
    name="fp32", atol=1e-4, rtol=1e-4, unit="fp32",
    description="fp32 exact: IEEE fp32 arithmetic, no TF32 admitted (ops PyTorch runs on "
                "TF32 by default, cuDNN's convolutions and RNNs, are still bounded at TF32)",
))
register_precision(PrecisionClass(
    name="tf32", atol=1e-2, rtol=1e-2, matched_ratio=0.999, worst_error_factor=10.0,
    unit="tf32", allow_tf32=True,
    description="fp32 data, matmul/conv may run on TF32 tensor cores (10-bit mantissa)",
))
register_precision(PrecisionClass(
    name="bf16", atol=2e-2, rtol=2e-2, matched_ratio=0.999, worst_error_factor=10.0,
    unit="bf16", description="bf16 data, fp32 accumulation; bf16 tensor cores",
))
register_precision(PrecisionClass(
    name="bf16_grad", atol=1e-6, rtol=2e-2, rms_atol=2e-2, matched_ratio=0.999,
    worst_error_factor=10.0, unit="bf16",
    description="gradients of a bf16 training step: bf16 data, fp32 accumulation; each "
                "element within 2% of itself plus 2% of the output's RMS (sums over tokens "
                "whose intermediates were rounded to bf16, as eager autograd does)",
))
register_precision(PrecisionClass(
    name="fp32_grad", atol=1e-9, rtol=1e-4, rms_atol=1e-5, unit="fp32",
    description="fp32 gradients (fp32 exact, no TF32): each element within 1e-4 of itself "
                "plus 1e-5 of the output's RMS (sums over tokens in another order)",
))
register_precision(PrecisionClass(
    name="fp16", atol=1e-2, rtol=1e-2, matched_ratio=0.999, worst_error_factor=10.0,
    unit="fp16", description="fp16 data, fp32 accumulation; fp16 tensor cores",
))
register_precision(PrecisionClass(
    name="fp8", atol=1e-3, rtol=2e-2, matched_ratio=0.99, worst_error_factor=10.0,
    unit="fp8",
    description="fp8 (e4m3/e5m2) GEMMs and quantization; fp8-typed outputs may be one fp8 "
                "rounding step off, other outputs (scales, bf16 results) are held to 2%",
))
register_precision(PrecisionClass(
    name="int8", atol=1e-3, rtol=2e-2, matched_ratio=0.99, worst_error_factor=10.0,
    unit="int8",
    description="int8 GEMMs and quantization; int8-typed outputs may be one step off at "
                "ties, other outputs (scales, bf16 results) are held to 2%",
))

# Outputs stored in 8 bits are judged by their own format whatever the class says: one
# rounding step of e4m3 (3 mantissa bits: 2**-3 relative) or of an integer code.
FP8_OUTPUT_RTOL = 0.13
FP8_OUTPUT_ATOL = 2.0**-9   # the smallest e4m3 subnormal
INT_CODE_STEPS = 1


def output_tolerance(pc: PrecisionClass, dtype: object) -> tuple[float, float]:
    """(atol, rtol) for one floating output of ``dtype`` under class ``pc``."""
    if "float8" in str(dtype):
        return max(pc.atol, FP8_OUTPUT_ATOL), max(pc.rtol, FP8_OUTPUT_RTOL)
    return pc.atol, pc.rtol
