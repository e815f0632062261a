"""The roofline time, the SOL score at its edges, and the faster-than-light check."""

from __future__ import annotations

import math

import pytest

from solforge.problems import get_precision
from solforge.sol import (
    DeviceProfile,
    TensorPart,
    Work,
    compute_time,
    faster_than_sol,
    load_profile,
    sol_score,
    sol_time,
    tensor_unit,
)


@pytest.fixture()
def h200() -> DeviceProfile:
    profile = load_profile("NVIDIA H200")
    assert profile is not None and profile.source == "table"
    return profile


# ---------------------------------------------------------------------------- score

def test_score_is_half_at_the_baseline():
    assert sol_score(t_k=2.0, t_b=2.0, t_sol=1.0) == pytest.approx(0.5)


def test_score_is_one_at_the_speed_of_light():
    assert sol_score(t_k=1.0, t_b=3.0, t_sol=1.0) == 1.0


def test_score_clamps_below_the_speed_of_light():
    assert sol_score(t_k=0.2, t_b=3.0, t_sol=1.0) == 1.0
    assert sol_score(t_k=0.0, t_b=3.0, t_sol=1.0) == 1.0


def test_score_when_baseline_is_at_or_below_sol():
    assert sol_score(t_k=0.9, t_b=0.8, t_sol=1.0) == 1.0
    assert sol_score(t_k=1.0, t_b=1.0, t_sol=1.0) == 1.0
    assert sol_score(t_k=1.1, t_b=0.8, t_sol=1.0) == 0.0
    assert sol_score(t_k=1.1, t_b=1.0, t_sol=1.0) == 0.0


def test_score_slower_than_baseline_is_below_half_and_positive():
    s = sol_score(t_k=5.0, t_b=2.0, t_sol=1.0)
    assert s == pytest.approx(1 / (1 + 4 / 1))
    assert 0 < s < 0.5
    assert sol_score(t_k=1e12, t_b=2.0, t_sol=1.0) < 1e-9


def test_score_between_sol_and_baseline():
    # halfway in time from T_b to T_SOL: 1 / (1 + 0.5) = 2/3
    assert sol_score(t_k=1.5, t_b=2.0, t_sol=1.0) == pytest.approx(2 / 3)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_score_rejects_bad_times(bad):
    with pytest.raises(ValueError):
        sol_score(bad, 1.0, 1.0)


# ---------------------------------------------------------------------------- roofline

def _fp32_matmul(flops: float) -> tuple[TensorPart, ...]:
    return (TensorPart(family="matmul", dtype="float32", flops=flops),)


def test_tf32_class_uses_the_tf32_rate(h200):
    m = n = k = 8192
    gemm = Work(tensor=_fp32_matmul(2 * m * n * k), bytes=4 * (m * k + k * n + m * n))
    assert tensor_unit(get_precision("tf32")) == "tf32"
    assert tensor_unit(get_precision("fp32")) == "fp32"
    tf32_ms, bound = sol_time(gemm, h200, get_precision("tf32"))
    fp32_ms, _ = sol_time(gemm, h200, get_precision("fp32"))
    assert bound == "compute"
    assert tf32_ms == pytest.approx(gemm.tensor_flops / (494.5e12) * 1e3)
    # exact fp32: three TF32 products per product on the tensor cores (3xTF32), faster
    # than the fp32 SIMT units' 67 TFLOP/s
    assert fp32_ms == pytest.approx(gemm.tensor_flops / (494.5e12 / 3) * 1e3)


def test_fp8_class_uses_the_fp8_rate_and_falls_back_without_it(h200):
    work = Work(tensor_flops=1e12, bytes=1.0)
    fp8_ms, _ = sol_time(work, h200, "fp8")
    assert fp8_ms == pytest.approx(1e12 / 1979e12 * 1e3)
    a100 = load_profile("NVIDIA A100-SXM4-80GB")
    assert "fp8" not in a100.peaks_tflops
    assert sol_time(work, a100, "fp8")[0] == pytest.approx(1e12 / 312e12 * 1e3)


def test_roofline_is_the_max_of_its_terms(h200):
    # RMSNorm on a 8192 x 4096 bf16 activation: memory-bound by far
    n = 8192 * 4096
    work = Work(vector_flops=4 * n, bytes=2 * (2 * n + 4096))
    ms, bound = sol_time(work, h200, "bf16")
    assert bound == "memory"
    assert ms == pytest.approx(work.bytes / 4800e9 * 1e3)
    # vector work is bounded by the fp32 SIMT rate even in a bf16 problem
    heavy = Work(tensor_flops=1e9, vector_flops=1e12, bytes=1.0)
    ms, bound = sol_time(heavy, h200, "bf16")
    assert bound == "compute" and ms == pytest.approx(1e12 / 67e12 * 1e3)


# ---------------------------------------------------------------------------- faster than light

def _h200_causal_attention(h200):
    b, h, s, d = 4, 32, 8192, 128
    flops = 4 * b * h * s * s * d / 2  # the declared causal half
    data = 4 * b * h * s * d * 2  # q, k, v, o in bf16
    work = Work(tensor_flops=flops, bytes=data)
    sol_ms, bound = sol_time(work, h200, "bf16")
    return work, sol_ms, bound


def test_honest_fused_causal_attention_is_not_rejected(h200):
    work, sol_ms, bound = _h200_causal_attention(h200)
    assert bound == "compute"
    # a flash-attention kernel at a realistic 60% of the bf16 peak on the causal half
    t_honest = work.tensor_flops / (0.60 * 989.5e12) * 1e3
    assert not faster_than_sol(t_honest, sol_ms, work.bytes, h200.llc_bytes)
    # even the best published Hopper kernels (~75% of peak) stay clear
    t_best = work.tensor_flops / (0.75 * 989.5e12) * 1e3
    assert not faster_than_sol(t_best, sol_ms, work.bytes, h200.llc_bytes)
    assert sol_score(t_honest, 2 * t_honest, sol_ms) > 0.5


def test_impossible_time_is_rejected(h200):
    work, sol_ms, _ = _h200_causal_attention(h200)
    assert work.bytes > h200.llc_bytes
    assert faster_than_sol(0.3 * sol_ms, sol_ms, work.bytes, h200.llc_bytes)


def test_data_in_cache_or_unknown_is_not_rejected(h200):
    small = 1024 * 1024  # fits in the 60 MB L2: a warm-cache time can beat DRAM bandwidth
    assert not faster_than_sol(0.01, 1.0, small, h200.llc_bytes)
    assert not faster_than_sol(0.01, 1.0, 1e12, None)
    assert not faster_than_sol(None, 1.0, 1e12, h200.llc_bytes)


def test_time_under_the_compute_term_is_rejected_even_in_cache(h200):
    """A warm cache speeds up loads, never arithmetic: a GEMM whose data fits in L2 still
    cannot beat its FLOPs at the peak (the frame-walking hack shrank its reported time to
    nearly 0 on a 512x1024x512 fp32 workload, 5 MB of data)."""
    work = Work(tensor=_fp32_matmul(2 * 512 * 1024 * 512),
                bytes=4 * (512 * 1024 * 2 + 512 * 512))
    assert work.bytes < h200.llc_bytes
    sol_ms, _ = sol_time(work, h200, "fp32")
    compute_ms = compute_time(work, h200, "fp32")
    assert 0 < compute_ms <= sol_ms
    assert faster_than_sol(1e-6, sol_ms, work.bytes, h200.llc_bytes, compute_ms)
    assert not faster_than_sol(0.6 * compute_ms, sol_ms, work.bytes, h200.llc_bytes, compute_ms)
    # without the compute term the cache rule alone lets it through, as before
    assert not faster_than_sol(1e-6, sol_ms, work.bytes, h200.llc_bytes)
