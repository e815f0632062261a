"""The depthwise convolution (``kernels/triton/depthwise.py``) under Triton's interpreter:
ATen's CUDA sums in ATen's order, checked against an emulation of that order (the bias
or 0, then each in-bounds tap in (kh, kw) order added by a fused multiply-add, rounded
once), and against PyTorch's own call. The GPU test checks bit-equality with PyTorch's
CUDA kernel itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.kernels.triton import depthwise_conv, depthwise_conv_raw


def _aten_order(x, w, b, s, p, d):
    """ATen's ``conv_depthwise2d_forward_kernel`` in float64 steps rounded to fp32 after
    each tap: an fma is the exact product plus the sum, rounded once (the product of two
    fp32 values is exact in float64; the sum's rounding twice differs from once only on
    ties, which these random inputs do not reach)."""
    one = x.dim() == 3
    if one:
        x, w, s, p, d = x[:, :, None], w[:, :, None], (1, *s), (0, *p), (1, *d)
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    ho = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    wo = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    xp = F.pad(x.double(), (p[1], p[1], p[0], p[0])).repeat_interleave(co // c, 1)
    inside = F.pad(torch.ones(1, 1, h, wd, dtype=torch.bool), (p[1], p[1], p[0], p[0]))
    start = b.float() if b is not None else torch.zeros(co)
    acc = start[None, :, None, None].expand(n, co, ho, wo).clone()
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * d[0], i * d[0] + s[0] * (ho - 1) + 1, s[0])
            cols = slice(j * d[1], j * d[1] + s[1] * (wo - 1) + 1, s[1])
            tap = (acc.double() + w[:, 0, i, j].double()[None, :, None, None]
                   * xp[:, :, rows, cols]).float()
            acc = torch.where(inside[:, :, rows, cols], tap, acc)
    return acc[:, :, 0] if one else acc


CASES = [  # input, weight, stride, padding, dilation, bias
    ((2, 3, 9, 11), (3, 1, 3, 3), (1, 1), (1, 1), (1, 1), True),
    ((1, 4, 10, 7), (8, 1, 3, 2), (2, 1), (0, 1), (1, 2), False),   # multiplier 2
    ((2, 2, 13, 12), (2, 1, 5, 5), (1, 2), (2, 2), (2, 1), True),
    ((1, 3, 6, 30), (3, 1, 3, 7), (1, 1), (0, 3), (1, 1), False),   # KernelBench 85's kind
    ((3, 5, 17), (5, 1, 4), (1,), (3,), (1,), True),                 # Mamba's causal conv
    ((2, 3, 20), (6, 1, 7), (2,), (3,), (2,), False),
    ((1, 2, 20, 20), (4, 1, 3, 3), (2, 1), (1, 2), (1, 2), True),  # tiles: 10x20 outputs
    ((2, 4, 150), (4, 1, 4), (1,), (3,), (1,), False),
    # planes of at most SMALL_PLANE outputs: whole planes a program, flattened
    ((3, 5, 7, 7), (5, 1, 3, 3), (1, 1), (1, 1), (1, 1), True),
    ((2, 6, 8, 9), (12, 1, 3, 3), (2, 2), (1, 1), (1, 1), False),
    ((2, 3, 9), (3, 1, 4), (1,), (3,), (1,), True),  # 1-D: row tiles however short
]


@pytest.mark.parametrize("xs,ws,s,p,d,has_bias", CASES)
def test_fp32_sums_are_aten_s_in_its_order(xs, ws, s, p, d, has_bias):
    torch.manual_seed(0)
    x, w = torch.randn(*xs), torch.randn(*ws)
    b = torch.randn(ws[0]) if has_bias else None
    got = depthwise_conv_raw(x, w, b, s, p, d, groups=xs[1])
    assert torch.equal(got, _aten_order(x, w, b, s, p, d))
    conv = F.conv1d if len(xs) == 3 else F.conv2d
    torch.testing.assert_close(got, conv(x, w, b, s, p, d, xs[1]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_16_bit_sums_in_fp32_rounded_once_to_nearest_even(dt):
    torch.manual_seed(1)
    x, w, b = torch.randn(2, 3, 9, 11, dtype=dt), torch.randn(3, 1, 3, 3, dtype=dt), \
        torch.randn(3, dtype=dt)
    got = depthwise_conv_raw(x, w, b, 1, 1, 1, 3)
    want = _aten_order(x.float(), w.float(), b.float(), (1, 1), (1, 1), (1, 1)).to(dt)
    assert got.dtype == dt and torch.equal(got, want)


@pytest.mark.parametrize("padding", ["same", "valid", 2, (1, 0)])
def test_the_module_s_own_settings_are_read_when_called(padding):
    torch.manual_seed(2)
    for k, d in ((3, 1), (4, 1), (3, 2)):
        if padding == "same" and d * (k - 1) % 2:
            continue  # PyTorch pads the input first; the kernel masks the same taps
        conv = nn.Conv2d(4, 8, (k, 3), padding=padding, dilation=(d, 1), groups=4)
        x = torch.randn(2, 4, 11, 9)
        got = depthwise_conv(x, conv)
        assert got.shape == conv(x).shape
        torch.testing.assert_close(got, conv(x), rtol=1e-5, atol=1e-6)
    conv1 = nn.Conv1d(6, 6, 4, padding="same", groups=6)  # an even kernel: 1 left, 2 right
    x = torch.randn(2, 6, 19)
    torch.testing.assert_close(depthwise_conv(x, conv1), conv1(x), rtol=1e-5, atol=1e-6)


def test_a_tap_outside_the_input_adds_nothing_even_with_an_infinite_weight():
    x = torch.ones(1, 2, 4, 4)
    w = torch.ones(2, 1, 3, 3)
    w[:, 0, 0, 0] = float("inf")  # the top-left tap: outside the input on row and column 0
    got = depthwise_conv_raw(x, w, None, 1, 1, 1, 2)
    assert torch.isfinite(got[:, :, 0, :]).all() and torch.isfinite(got[:, :, :, 0]).all()
    assert torch.isinf(got[:, :, 1:, 1:]).all()


def test_layouts_pytorch_would_send_to_cudnn_run_pytorch_s_call():
    torch.manual_seed(3)
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4)
    x = torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last)
    assert torch.equal(depthwise_conv(x, conv), conv(x))
    strided = torch.randn(2, 4, 9, 18)[..., ::2]
    assert torch.equal(depthwise_conv(strided, conv), conv(strided))


def test_empty_batch_and_bad_input_say_what_to_fix():
    assert depthwise_conv_raw(torch.randn(0, 4, 8, 8), torch.randn(4, 1, 3, 3), None, 1, 1,
                              1, 4).shape == (0, 4, 8, 8)
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 1, 3, 3)
    with pytest.raises(ValueError, match="not depthwise"):
        depthwise_conv_raw(x, torch.randn(4, 2, 3, 3), None, 1, 1, 1, 2)
    with pytest.raises(ValueError, match="not depthwise"):  # one channel: cuDNN's
        depthwise_conv_raw(x[:, :1], w[:1], None, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="numbers, 'same' or 'valid'"):
        depthwise_conv_raw(x, w, None, 1, "full", 1, 4)
    with pytest.raises(ValueError, match="one of fp32, fp16, bf16"):
        depthwise_conv_raw(x, w.double(), None, 1, 1, 1, 4)
    with pytest.raises(ValueError, match="gives no output"):
        depthwise_conv_raw(x, torch.randn(4, 1, 11, 3), None, 1, 0, 1, 4)
    with pytest.raises(ValueError, match="needs stride 1"):
        depthwise_conv_raw(x, w, None, 2, "same", 1, 4)
    with pytest.raises(ValueError, match="1-D and 2-D"):
        depthwise_conv_raw(torch.randn(1, 4, 4, 4, 4), torch.randn(4, 1, 3, 3, 3), None, 1,
                           1, 1, 4)
    with pytest.raises(ValueError, match="zeros only"):
        depthwise_conv(x, nn.Conv2d(4, 4, 3, padding=1, groups=4, padding_mode="reflect"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_gpu_outputs_are_pytorch_s_bit_for_bit(dt):
    """On a GPU, PyTorch's own depthwise kernel: equal outputs, to the bit, for 1-D and 2-D,
    square and asymmetric kernels (the 3x3 template and the generic loop), a bias, strides,
    dilation and a channel multiplier."""
    torch.manual_seed(0)
    for xs, ws, s, p, d, has_bias in CASES + [((4, 64, 130, 70), (64, 1, 3, 3), (1, 1),
                                               (0, 0), (1, 1), False),
                                              ((2, 96, 56, 56), (96, 1, 7, 7), (1, 1),
                                               (3, 3), (1, 1), True)]:
        x = torch.rand(*xs, device="cuda", dtype=dt)
        w = torch.randn(*ws, device="cuda", dtype=dt)
        b = torch.randn(ws[0], device="cuda", dtype=dt) if has_bias else None
        conv = F.conv1d if len(xs) == 3 else F.conv2d
        want = conv(x, w, b, s, p, d, xs[1])
        assert torch.equal(depthwise_conv_raw(x, w, b, s, p, d, xs[1]), want), (xs, ws)
