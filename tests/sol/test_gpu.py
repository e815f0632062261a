"""Calibration and counting on a real GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.sol import (
    Work,
    calibrate,
    count_work,
    faster_than_sol,
    load_profile,
    match_device,
    sol_time,
)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def measured():
    return calibrate("cuda", quick=True)


def test_cuda_calibration_is_sane(measured):
    assert measured.name == torch.cuda.get_device_name()
    assert measured.peaks_tflops["bf16"] > measured.peaks_tflops["fp32"] > 1
    assert measured.bandwidth_gbs > 100
    assert 0 < measured.empty_kernel_ms < 0.05
    assert measured.llc_bytes and measured.llc_bytes > 1 << 20
    spec = match_device(measured.name)
    if spec is not None:  # a measurement never beats the datasheet by much
        for unit, rate in measured.peaks_tflops.items():
            assert rate < 1.1 * spec.peaks_tflops[unit], unit
        assert measured.bandwidth_gbs < 1.05 * spec.bandwidth_gbs


def _time_ms(fn, iters=10):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


class CausalAttention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_pytorch_causal_attention_is_not_faster_than_light(measured):
    b, h, s, d = 2, 16, 4096, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    model = CausalAttention()
    counted = count_work(model, [q, k, v])
    assert counted.tensor_flops == 4 * b * h * s * s * d
    declared = counted.with_declared(counted.tensor_flops / 2, 4 * q.numel() * 2)
    t = _time_ms(lambda: model(q, k, v))
    for profile in (measured, load_profile(measured.name)):
        if profile is None:
            continue
        sol_ms, bound = sol_time(declared, profile, "bf16")
        assert bound == "compute"
        assert not faster_than_sol(t, sol_ms, declared.bytes, profile.llc_bytes)


def test_large_copy_is_not_faster_than_light(measured):
    x = torch.randn(256 * 1024 * 1024, device="cuda")
    y = torch.empty_like(x)
    t = _time_ms(lambda: y.copy_(x))
    work = Work(bytes=2 * x.numel() * 4)
    sol_ms, bound = sol_time(work, measured, "fp32")
    assert bound == "memory"
    assert t >= 0.9 * sol_ms  # the copy is the bandwidth measurement itself


def test_fp32_conv_on_cudnn_tf32_is_not_faster_than_light(measured):
    """cuDNN runs fp32 convolutions on TF32 by PyTorch's default: bounded at the fp32 SIMT
    rate, KernelBench's 1_Conv2D_ReLU_BiasAdd baseline was judged faster than light."""
    conv = nn.Conv2d(64, 128, 3, device="cuda")
    x = torch.randn(32, 64, 128, 128, device="cuda")
    work = count_work(conv, [x])
    assert [(p.family, p.dtype) for p in work.tensor] == [("conv", "float32")]
    with torch.no_grad():
        t = _time_ms(lambda: conv(x))
    for profile in (measured, load_profile(measured.name)):
        if profile is None:
            continue
        sol_ms, _ = sol_time(work, profile, "fp32")
        assert t >= sol_ms, (t, sol_ms, profile.source)
