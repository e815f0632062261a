"""The unit each op family's tensor FLOPs are bounded at: PyTorch's settings, the data type
and the precision class, whichever admits the fastest; and the unit recorded."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.records.evaluation import WorkloadResult
from solforge.sol import (
    DeviceProfile,
    MathFlags,
    TensorPart,
    Work,
    annotate,
    compute_time,
    count_work,
    faster_than_sol,
    load_profile,
    read_math_flags,
    sol_time,
    tensor_terms,
)
from solforge.sol.profile import read_profile

S10 = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-02-h200-s10"
NEW_API = hasattr(torch._C, "_get_fp32_precision_getter")


@pytest.fixture()
def h200() -> DeviceProfile:
    profile = load_profile("NVIDIA H200")
    assert profile is not None and profile.source == "table"
    return profile


@pytest.fixture()
def cpu() -> DeviceProfile:
    return DeviceProfile(name="cpu", source="calibrated", peaks_tflops={"fp32": 2.0, "bf16": 4.0},
                         bandwidth_gbs=50.0)


def _units(work: Work, profile: DeviceProfile, precision: str, flags: MathFlags | None = None
           ) -> list[str]:
    return [t.unit for t in tensor_terms(work, profile, precision, flags)]


def _part(family: str, dtype: str = "float32", flops: float = 1e12) -> Work:
    return Work(tensor=(TensorPart(family=family, dtype=dtype, flops=flops),), bytes=1.0)


@contextlib.contextmanager
def _matmul_precision(value: str) -> Iterator[None]:
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


@contextlib.contextmanager
def _cudnn_tf32(value: bool) -> Iterator[None]:
    old = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = value
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = old


# ---------------------------------------------------------------------------- PyTorch's settings

def test_pytorch_defaults_are_what_the_flags_read():
    assert read_math_flags() == MathFlags(api=read_math_flags().api)


def test_fp32_conv_follows_cudnn_allow_tf32(h200):
    conv = _part("conv")
    assert _units(conv, h200, "fp32", read_math_flags()) == ["tf32"]  # PyTorch's default
    with _cudnn_tf32(False):
        flags = read_math_flags()
    # without TF32, fp32 accuracy on the tensor cores (3xTF32) is still faster than SIMT
    assert flags.cuda_conv == "ieee" and _units(conv, h200, "fp32", flags) == ["3xtf32"]
    assert _units(conv, h200, "fp32", MathFlags(cudnn_enabled=False)) == ["3xtf32"]


@pytest.mark.skipif(not NEW_API, reason="PyTorch before the fp32_precision settings")
def test_fp32_conv_follows_the_fp32_precision_setting(h200):
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    try:
        flags = read_math_flags()
    finally:
        torch.backends.cudnn.conv.fp32_precision = "tf32"
    assert (flags.cuda_conv, flags.cuda_rnn) == ("ieee", "tf32")
    assert _units(_part("conv"), h200, "fp32", flags) == ["3xtf32"]
    assert _units(_part("rnn"), h200, "fp32", flags) == ["tf32"]


def test_fp32_matmul_follows_the_float32_matmul_precision(h200):
    mm = _part("matmul")
    # PyTorch's default (cuBLAS at fp32): fp32 accuracy on the tensor cores is faster
    assert _units(mm, h200, "fp32", read_math_flags()) == ["3xtf32"]
    with _matmul_precision("high"):
        assert _units(mm, h200, "fp32", read_math_flags()) == ["tf32"]
    with _matmul_precision("medium"):  # documented to let fp32 matmuls compute in bf16
        assert _units(mm, h200, "fp32", read_math_flags()) == ["bf16"]
    assert _units(mm, h200, "fp32", read_math_flags()) == ["3xtf32"]


def test_fp32_attention_runs_on_3xtf32_or_the_math_backend(h200):
    att = _part("attention")
    (term,) = tensor_terms(att, h200, "fp32", MathFlags())
    assert term.unit == "3xtf32" and term.tflops == pytest.approx(494.5 / 3)
    assert _units(att, h200, "fp32", MathFlags(efficient_sdpa=False)) == ["3xtf32"]
    assert _units(att, h200, "fp32", MathFlags(cuda_matmul="tf32")) == ["tf32"]


def test_fp32_rnn_follows_cudnn(h200):
    assert _units(_part("rnn"), h200, "fp32", MathFlags()) == ["tf32"]
    assert _units(_part("rnn"), h200, "fp32", MathFlags(cuda_rnn="ieee")) == ["3xtf32"]


def test_fp32_gemms_on_a_gpu_may_run_at_fp32_accuracy_on_the_tensor_cores(h200, cpu):
    """3xTF32: three TF32 products per fp32 product, a third of the TF32 rate, which a
    kernel reaches where cuBLAS at fp32 does not (kernels/triton/gemm_f32x3.py)."""
    (term,) = tensor_terms(_part("matmul"), h200, "fp32", MathFlags())
    assert term.unit == "3xtf32" and term.tflops == pytest.approx(494.5 / 3)
    assert "3xTF32" in term.why and "gemm_f32x3" in term.why
    assert _units(_part("matmul"), cpu, "fp32", MathFlags()) == ["fp32"]  # no tensor cores
    no_tf32 = DeviceProfile(name="old gpu", source="calibrated", peaks_tflops={"fp32": 10.0},
                            bandwidth_gbs=500.0)
    assert _units(_part("matmul"), no_tf32, "fp32", MathFlags()) == ["fp32"]
    # a device whose fp32 units outrun a third of its TF32 rate keeps them
    fast_simt = DeviceProfile(name="simt gpu", source="calibrated",
                              peaks_tflops={"fp32": 60.0, "tf32": 120.0}, bandwidth_gbs=500.0)
    assert _units(_part("matmul"), fast_simt, "fp32", MathFlags()) == ["fp32"]


def test_a_cpu_follows_onednn(cpu):
    assert _units(_part("conv"), cpu, "fp32", MathFlags()) == ["fp32"]
    assert _units(_part("matmul"), cpu, "fp32", MathFlags(cpu_matmul="bf16")) == ["bf16"]
    # TF32 where a CPU has no such unit: its fp32 rate
    assert _units(_part("matmul"), cpu, "fp32", MathFlags(cpu_matmul="tf32")) == ["fp32"]


# ---------------------------------------------------------------------------- data type, class

def test_low_precision_data_runs_on_its_own_unit(h200):
    flags = MathFlags()
    assert _units(_part("matmul", "bfloat16"), h200, "bf16", flags) == ["bf16"]
    assert _units(_part("conv", "float16"), h200, "fp16", flags) == ["fp16"]
    assert _units(_part("matmul", "float8_e4m3fn"), h200, "fp8", flags) == ["fp8"]
    assert _units(_part("matmul", "int8"), h200, "int8", flags) == ["int8"]
    # an fp32-class problem's bf16 GEMM still runs on bf16 tensor cores
    assert _units(_part("matmul", "bfloat16"), h200, "fp32", flags) == ["bf16"]
    assert _units(_part("matmul", "float64"), h200, "fp32", flags) == ["fp32"]


def test_the_class_wins_where_it_admits_a_faster_unit(h200):
    flags = MathFlags()
    assert _units(_part("matmul"), h200, "tf32", flags) == ["tf32"]
    assert _units(_part("conv"), h200, "bf16", flags) == ["bf16"]
    # router_logits_deepseek_v3: fp32 matmul of bf16 values, sol_unit bf16
    assert _units(_part("matmul"), h200, "bf16", flags) == ["bf16"]
    # and never makes a library's unit slower: an exact-fp32 class keeps cuDNN's TF32
    assert _units(_part("conv"), h200, "fp32", flags) == ["tf32"]


def test_declared_flops_run_at_the_fastest_unit_of_the_counted_ops(h200):
    counted = Work(tensor=(TensorPart(family="conv", dtype="float32", flops=6e11),
                           TensorPart(family="matmul", dtype="float32", flops=4e11)), bytes=1.0)
    declared = counted.with_declared(5e11, None)
    assert declared.tensor_flops == 5e11
    assert all(p.flops == 0 for p in declared.tensor) and declared.unattributed_flops == 5e11
    (term,) = tensor_terms(declared, h200, "fp32", MathFlags())
    assert term.unit == "tf32" and term.flops == 5e11 and term.what.startswith("declared")


def test_a_work_without_parts_takes_the_fastest_fp32_unit(h200, cpu):
    # a count cached before the split: TF32 by cuDNN's default is the fastest fp32 unit
    bare = Work(tensor_flops=1e12, bytes=1.0)
    assert _units(bare, h200, "fp32", MathFlags()) == ["tf32"]
    assert _units(bare, cpu, "fp32", MathFlags()) == ["fp32"]
    assert _units(bare, h200, "bf16", MathFlags()) == ["bf16"]


def test_units_sharing_the_tensor_cores_add_up_and_simt_overlaps(h200):
    work = Work(tensor=(TensorPart(family="conv", dtype="float32", flops=4.945e11),
                        TensorPart(family="matmul", dtype="bfloat16", flops=9.895e11),
                        TensorPart(family="matmul", dtype="float64", flops=6.7e10)), bytes=1.0)
    # 1 ms of TF32 + 1 ms of bf16 on the tensor cores; 1 ms of SIMT (float64 data, bounded
    # at the fp32 rate) beside them
    assert compute_time(work, h200, "fp32", MathFlags()) == pytest.approx(2.0)


# ---------------------------------------------------------------------------- counting

class ConvReluBias(nn.Module):
    """KernelBench level 2, 1_Conv2D_ReLU_BiasAdd."""

    def __init__(self, cin: int = 64, cout: int = 128, k: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.bias = nn.Parameter(torch.randn(cout, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


def test_kernelbench_fp32_conv_is_bounded_at_tf32():
    """The honest torch.compile baseline of 1_Conv2D_ReLU_BiasAdd ran 1.63 ms on the H200
    (cuDNN's TF32 kernels); bounded at the fp32 SIMT rate its roofline was 5.85 ms and the
    baseline was judged faster than light."""
    profile = read_profile(S10 / "calibration-call1.json")
    with torch.device("meta"):
        model, x = ConvReluBias(), torch.randn(128, 64, 128, 128)
    work = count_work(model, [x])
    assert [(p.family, p.dtype) for p in work.tensor] == [("conv", "float32")]
    compile_ms = 1.63
    sol_ms, _ = sol_time(work, profile, "fp32", MathFlags())
    compute = compute_time(work, profile, "fp32", MathFlags())
    assert sol_ms < compile_ms
    assert not faster_than_sol(compile_ms, sol_ms, work.bytes, profile.llc_bytes, compute)
    # with TF32 off the bound is fp32 accuracy on the tensor cores (3xTF32), not the SIMT
    # units' 5.87 ms: a 1.63 ms kernel is fast, not impossible
    off = MathFlags(cuda_conv="ieee")
    ratio = profile.peak("fp32") / (profile.peak("tf32") / 3)
    assert sol_time(work, profile, "fp32", off)[0] == pytest.approx(5.87 * ratio, rel=0.01)
    assert not faster_than_sol(compile_ms, None, None, None,
                               compute_time(work, profile, "fp32", off))


def test_counted_parts_name_each_family_and_dtype():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(8, 16, 3)
            self.lin = nn.Linear(16, 16).to(torch.bfloat16)
            self.lstm = nn.LSTM(16, 32, num_layers=2, bidirectional=True)

        def forward(self, x):
            h = self.conv(x).transpose(1, 2)  # (batch, time, 16)
            h = self.lin(h.to(torch.bfloat16)).float()
            q = h.unsqueeze(1)
            a = F.scaled_dot_product_attention(q, q, q).squeeze(1)
            return self.lstm(a.transpose(0, 1))[0]

    b, t = 2, 12
    work = count_work(Mixed().eval(), [torch.randn(b, 8, t + 2)])
    parts = {(p.family, p.dtype): p.flops for p in work.tensor}
    assert parts[("conv", "float32")] == 2 * b * t * 16 * 8 * 3
    assert parts[("matmul", "bfloat16")] == 2 * b * t * 16 * 16
    assert parts[("attention", "float32")] == 4 * b * t * t * 16
    # LSTM: 2 FLOPs per weight-matrix element per token, every layer and direction
    lstm = 2 * b * t * 2 * (4 * 32 * 16 + 4 * 32 * 32 + 4 * 32 * 64 + 4 * 32 * 32)
    assert parts.get(("rnn", "float32"), parts.get(("matmul", "float32"))) == lstm
    assert work.unattributed_flops == 0
    assert work.tensor_flops == sum(parts.values())


def test_counted_parts_survive_the_cache_round_trip():
    work = count_work(nn.Conv2d(2, 4, 3), [torch.randn(1, 2, 6, 6)])
    assert Work.model_validate(work.model_dump()) == work
    # a count stored before parts existed reads back without them: unattributed
    old = Work.model_validate({"tensor_flops": 5.0, "vector_flops": 0.0, "bytes": 1.0,
                               "source": "counted"})
    assert old.tensor == () and old.unattributed_flops == 5.0


# ---------------------------------------------------------------------------- the record

def test_the_record_says_which_unit_bounded_the_tensor_flops(h200):
    work = count_work(ConvReluBias(4, 8), [torch.randn(2, 4, 16, 16)])
    res = annotate(WorkloadResult(name="w", correct=True, time_ms=1.0), work, h200, "fp32", 2.0,
                   MathFlags())
    assert res.sol_unit == "tf32"
    assert res.sol_unit_reason.startswith("conv float32: tf32 (cuDNN fp32 conv")
    assert "fp32_precision='tf32'" in res.sol_unit_reason
    assert "PyTorch's default" in res.sol_unit_reason
    vector = annotate(WorkloadResult(name="v"), Work(vector_flops=10.0, bytes=10.0), h200,
                      "fp32", None, MathFlags())
    assert vector.sol_unit is None and vector.sol_unit_reason is None
