"""Which hardware units PyTorch's own kernels may run an op's tensor FLOPs on.

An honest kernel may do what PyTorch does under the settings in force, so the speed of light
of tensor work is bounded at the fastest of: the unit the op's data type runs on, the units
PyTorch's math settings give that op family for fp32 data, and the unit the precision class
admits (``roofline.tensor_terms`` takes that maximum). This module says what PyTorch's
libraries may use; the class's side is ``precision.py``.

Data types other than fp32 run on their own unit: bf16, fp16, fp8 (``_scaled_mm``), fp4,
int8 (``_int_mm``). fp64 is bounded at the fp32 rate (Hopper's fp64 tensor rate equals its
fp32 SIMT rate). For fp32 data, per op family, on a GPU (CUDA) and a CPU (oneDNN):

- ``matmul`` (mm, addmm, bmm, baddbmm; ``linear``, ``matmul`` and ``einsum`` reach these):
  TF32 when ``torch.backends.cuda.matmul.fp32_precision`` is 'tf32'
  (``set_float32_matmul_precision('high')``, or ``cuda.matmul.allow_tf32``); bf16 under
  'medium', whose documented contract lets fp32 matmuls compute in bf16; else the fp32 SIMT
  rate, PyTorch's default. On a CPU, oneDNN's matmul setting ('bf16', 'tf32').
- ``conv`` (convolution of any rank, transposed too): TF32 when
  ``torch.backends.cudnn.conv.fp32_precision`` is 'tf32' (``cudnn.allow_tf32``), PyTorch's
  default: cuDNN's fp32 convolutions run kernels named ``...tf32f32...``; fp32 with cuDNN
  disabled. On a CPU, oneDNN's conv setting.
- ``rnn`` (cuDNN's and oneDNN's LSTM, GRU, RNN): ``cudnn.rnn.fp32_precision``, default TF32.
- ``attention`` (the fused SDPA kernels): the memory-efficient kernel's fp32 GEMMs are
  CUTLASS ``OpMultiplyAddFastF32`` on compute capability 8.0 and later, three TF32 products
  per fp32 product (``3xtf32``: a third of the TF32 rate), whatever the flags; and the math
  backend's matmuls, at the matmul unit. On a CPU, the matmul unit.

The settings are read where the bound is computed (the judge, after the problem's module and
model were built, so settings a problem makes at import or in its constructor count, as
they do for the baselines the same process times).

Not covered: settings changed only inside ``forward`` (a ``with cudnn.flags(...)`` block:
the settings outside it are used), "high"'s bf16x3 algorithm on a CPU (bounded as TF32,
which a CPU profile does not have, so at fp32), cuDNN's choice of a non-tensor-core kernel
for a given shape (depthwise convolutions: the bound stays at the faster unit, a lower
bound), and vector (SIMT) work on packed 16-bit data (bounded at the fp32 rate,
``roofline.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

OpFamily = Literal["matmul", "conv", "rnn", "attention"]
FAMILIES: tuple[OpFamily, ...] = ("matmul", "conv", "rnn", "attention")

# a third of the TF32 rate: the memory-efficient SDPA kernel's exact-fp32 GEMMs (module doc)
TF32X3 = "3xtf32"

_DTYPE_UNIT = {
    "bfloat16": "bf16", "float16": "fp16", "int8": "int8", "uint8": "int8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8", "float4_e2m1fn_x2": "fp4",
}


@dataclass(frozen=True)
class MathFlags:
    """PyTorch's settings that decide the unit its libraries give fp32 data. The defaults are
    PyTorch's own; ``read_math_flags`` reads the ones in force."""

    cuda_matmul: str = "ieee"  # cuBLAS fp32 GEMMs: 'tf32' lets them use TF32 tensor cores
    cuda_conv: str = "tf32"  # cuDNN fp32 convolutions: TF32 by default (PyTorch 1.7 on)
    cuda_rnn: str = "tf32"  # cuDNN fp32 RNN, LSTM, GRU
    cpu_matmul: str = "ieee"  # oneDNN: 'bf16' or 'tf32' let it use those units
    cpu_conv: str = "ieee"
    cpu_rnn: str = "ieee"
    matmul_precision: str = "highest"  # get_float32_matmul_precision(), 'unknown' if refused
    cudnn_enabled: bool = True
    efficient_sdpa: bool = True  # the memory-efficient SDPA backend may be chosen
    api: Literal["fp32_precision", "allow_tf32"] = "fp32_precision"  # knobs the reasons name


class UnitChoice(NamedTuple):
    """A unit some kernel may run a piece of tensor work on, and why it may."""

    unit: str
    why: str


def read_math_flags() -> MathFlags:
    """The settings in force now: PyTorch's ``fp32_precision`` settings where this PyTorch has
    them (2.9 on), else the older ``allow_tf32`` flags. A setting that cannot be read (PyTorch
    refuses to answer once old and new APIs were mixed) is taken as the faster choice, so the
    bound stays a lower bound."""
    b = torch.backends
    ops = ("matmul", "conv", "rnn")
    if hasattr(torch._C, "_get_fp32_precision_getter"):
        api = "fp32_precision"
        cuda = {op: _read(lambda op=op: _resolved("cuda", op), "tf32") for op in ops}
        cpu = {op: _read(lambda op=op: _resolved("mkldnn", op), "bf16") for op in ops}
    else:
        api = "allow_tf32"
        matmul = _read(lambda: "tf32" if b.cuda.matmul.allow_tf32 else "ieee", "tf32")
        cudnn = _read(lambda: "tf32" if b.cudnn.allow_tf32 else "ieee", "tf32")
        cuda = {"matmul": matmul, "conv": cudnn, "rnn": cudnn}
        cpu = dict.fromkeys(ops, "ieee")
    return MathFlags(
        cuda_matmul=cuda["matmul"], cuda_conv=cuda["conv"], cuda_rnn=cuda["rnn"],
        cpu_matmul=cpu["matmul"], cpu_conv=cpu["conv"], cpu_rnn=cpu["rnn"],
        matmul_precision=_read(torch.get_float32_matmul_precision, "unknown"),
        cudnn_enabled=bool(b.cudnn.enabled),
        efficient_sdpa=bool(b.cuda.mem_efficient_sdp_enabled()),
        api=api,
    )


def library_units(family: str, dtype: str, flags: MathFlags, gpu: bool
                  ) -> tuple[UnitChoice, ...]:
    """The units PyTorch's kernels may run ``family`` work on ``dtype`` data on (a GPU when
    ``gpu``, else a CPU) under ``flags``; the fastest of them bounds it."""
    dtype = dtype.removeprefix("torch.")
    if dtype in _DTYPE_UNIT:
        unit = _DTYPE_UNIT[dtype]
        return (UnitChoice(unit, f"{dtype} data"),)
    if dtype != "float32":
        return (UnitChoice("fp32", f"{dtype} data, bounded at the fp32 rate"),)
    if family == "attention":
        math = library_units("matmul", dtype, flags, gpu)
        if gpu and flags.efficient_sdpa:
            return (UnitChoice(TF32X3, "the memory-efficient SDPA kernel's fp32 GEMMs are "
                               "3xTF32 (CUTLASS OpMultiplyAddFastF32)"),
                    *(UnitChoice(u.unit, f"the math backend's matmuls: {u.why}") for u in math))
        return math
    if gpu:
        return (_gpu_fp32(family, flags),)
    setting = {"conv": flags.cpu_conv, "rnn": flags.cpu_rnn}.get(family, flags.cpu_matmul)
    if family == "matmul" and flags.matmul_precision == "medium":
        setting = "bf16"
    unit = {"bf16": "bf16", "tf32": "tf32"}.get(setting, "fp32")
    return (UnitChoice(unit, f"oneDNN fp32 {family}: {_knob('mkldnn', family, setting, flags)}"),)


def _gpu_fp32(family: str, flags: MathFlags) -> UnitChoice:
    if family == "matmul":
        if flags.matmul_precision == "medium":
            return UnitChoice("bf16", "fp32 matmul under set_float32_matmul_precision('medium'),"
                              " which lets it compute in bf16")
        unit = "tf32" if flags.cuda_matmul == "tf32" else "fp32"
        return UnitChoice(unit, f"cuBLAS fp32 matmul: "
                          f"{_knob('cuda', 'matmul', flags.cuda_matmul, flags)}")
    if family == "conv" and not flags.cudnn_enabled:
        return UnitChoice("fp32", "fp32 conv with cuDNN disabled (torch.backends.cudnn.enabled"
                          "=False)")
    setting = flags.cuda_rnn if family == "rnn" else flags.cuda_conv
    unit = "tf32" if setting == "tf32" else "fp32"
    return UnitChoice(unit, f"cuDNN fp32 {family}: {_knob('cuda', family, setting, flags)}")


# PyTorch's defaults, to say so in a reason (a problem that changed a setting shows it)
_DEFAULTS = {("cuda", "matmul"): "ieee", ("cuda", "conv"): "tf32", ("cuda", "rnn"): "tf32",
             ("mkldnn", "matmul"): "ieee", ("mkldnn", "conv"): "ieee", ("mkldnn", "rnn"): "ieee"}


def _knob(backend: str, family: str, setting: str, flags: MathFlags) -> str:
    """The setting a reason names, in the API this PyTorch has, e.g.
    "torch.backends.cudnn.conv.fp32_precision='tf32' (PyTorch's default)"."""
    default = " (PyTorch's default)" if _DEFAULTS.get((backend, family)) == setting else ""
    if flags.api == "fp32_precision":
        where = "cuda.matmul" if (backend, family) == ("cuda", "matmul") else (
            f"cudnn.{family}" if backend == "cuda" else f"mkldnn.{family}")
        return f"torch.backends.{where}.fp32_precision='{setting}'{default}"
    if backend == "cuda":
        where = "cuda.matmul" if family == "matmul" else "cudnn"
        return f"torch.backends.{where}.allow_tf32={setting == 'tf32'}{default}"
    return "IEEE fp32 (this PyTorch has no oneDNN fp32_precision setting)"


# (backend, op) -> the torch.backends attribute holding that fp32_precision setting
_ATTRS: dict[tuple[str, str], tuple[str, ...]] = {
    ("cuda", "matmul"): ("cuda", "matmul"), ("cuda", "conv"): ("cudnn", "conv"),
    ("cuda", "rnn"): ("cudnn", "rnn"), ("cuda", "all"): ("cudnn",),
    ("mkldnn", "matmul"): ("mkldnn", "matmul"), ("mkldnn", "conv"): ("mkldnn", "conv"),
    ("mkldnn", "rnn"): ("mkldnn", "rnn"), ("mkldnn", "all"): ("mkldnn",),
    ("generic", "all"): (),
}


def _resolved(backend: str, op: str) -> str:
    """An op's effective fp32_precision as PyTorch resolves it (``Context::float32Precision``):
    its own setting, else its backend's, else the generic one; 'none' all the way is IEEE."""
    for key in ((backend, op), (backend, "all"), ("generic", "all")):
        holder = torch.backends
        for name in _ATTRS[key]:
            holder = getattr(holder, name)
        value = str(holder.fp32_precision)
        if value != "none":
            return value
    return "ieee"


def _read(get: Callable[[], str], fallback: str) -> str:
    with contextlib.suppress(AttributeError, RuntimeError):
        return str(get())
    return fallback
