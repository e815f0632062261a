"""Depthwise convolution (``groups == in_channels``) of 1-D and 2-D inputs, with PyTorch's
own arithmetic: the sums of ATen's CUDA depthwise kernel, in its order, rounded once.

On a GPU, PyTorch runs a contiguous (NCL / NCHW) depthwise convolution in fp32 or bf16,
and in fp16 where cuDNN's heuristics decline it, with its own kernel
(``aten/src/ATen/native/cuda/DepthwiseConv2d.cu``; a 1-D convolution is viewed as 2-D of
height 1): one thread per output, which starts from the bias (or 0) and adds each tap that
falls inside the input, in (kh, kw) order, as ``value += w * x`` in fp32 (a fused
multiply-add), then rounds once to the output dtype. ``torch.compile`` calls the same
kernel (Inductor does not lower convolutions). That kernel reads its taps through the
cache one output at a time and, for kernel sizes other than 1x1 and 3x3, loops over
runtime bounds.

:func:`depthwise_conv` computes the same sums in the same order (``tl.fma`` from the bias
or 0, taps in (kh, kw) order, a tap outside the input leaving the sum untouched), so its
output is PyTorch's bit for bit where PyTorch runs that kernel; each program computes a
tile of one output plane, the kernel's size unrolled. That matters beyond the convolution
itself: an fp32 output that feeds a TF32 convolution (MobileNet's pointwise convolution
after the depthwise one) must match to the bit, or TF32's rounding of the next
convolution's input turns an ulp into 1e-4 (``search/patterns/batchnorm.py``).

Where PyTorch would not run that kernel, PyTorch's own call runs instead, so the result
stays PyTorch's: an input in channels-last (or any non-contiguous) layout (cuDNN), a
tensor past 32-bit indexing, a CPU tensor outside the interpreter. fp16 is computed here
although PyTorch runs cuDNN for most fp16 shapes: the same fp32 sums rounded to fp16,
within an ulp of cuDNN's, not bit for bit.

Not covered: 3-D inputs (``nn.Conv3d``: ATen's 3-D depthwise kernel is another one);
transposed convolutions; padding modes other than zeros; a bias or weight in another dtype
than the input's; bit-equality with cuDNN (fp16, channels-last: PyTorch's own call runs
for the latter).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, autotune_configs, cast_rne

# the output dtypes whose rounding (fp32 -> dtype, to nearest even) the store matches
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# grid axis 1 (the tiles of one plane) is capped by CUDA at 65535 programs
_MAX_TILES = 65535


def _configs(one_row: bool) -> list[triton.Config]:
    if one_row:  # 1-D convolutions: a plane is one row
        gpu = [triton.Config({"BLOCK_H": 1, "BLOCK_W": w}, num_warps=nw)
               for w, nw in ((256, 2), (512, 4), (1024, 8))]
        return autotune_configs(gpu, triton.Config({"BLOCK_H": 1, "BLOCK_W": 8}, num_warps=1))
    gpu = [triton.Config({"BLOCK_H": h, "BLOCK_W": w}, num_warps=nw)
           for h, w, nw in ((8, 64, 4), (16, 64, 4), (8, 128, 4), (32, 32, 4), (4, 256, 8))]
    # the interpreter: small tiles, so CPU shapes cross tiles and edges in both dims
    return autotune_configs(gpu, triton.Config({"BLOCK_H": 4, "BLOCK_W": 8}, num_warps=1))


@triton.jit
def _depthwise_body(x_ptr, w_ptr, b_ptr, y_ptr, C_OUT, MULT, H, W, H_OUT, W_OUT,
                    SH, SW, PH, PW, DH, DW,
                    KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr,
                    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    plane = tl.program_id(0).to(tl.int64)  # n * C_OUT + c
    tile = tl.program_id(1)
    c = plane % C_OUT
    n = plane // C_OUT
    in_plane = n * (C_OUT // MULT) + c // MULT
    TILES_W = tl.cdiv(W_OUT, BLOCK_W)
    x_base = x_ptr + in_plane * H * W
    rows = (tile // TILES_W) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = (tile % TILES_W) * BLOCK_W + tl.arange(0, BLOCK_W)
    if HAS_BIAS:
        acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32) + tl.load(b_ptr + c).to(tl.float32)
    else:
        acc = tl.zeros((BLOCK_H, BLOCK_W), dtype=tl.float32)
    w_base = w_ptr + c * (KH * KW)
    for kh in tl.static_range(KH):
        ih = rows * SH + (kh * DH - PH)
        in_h = (ih >= 0) & (ih < H)
        for kw in tl.static_range(KW):
            iw = cols * SW + (kw * DW - PW)
            inside = in_h[:, None] & ((iw >= 0) & (iw < W))[None, :]
            x = tl.load(x_base + ih[:, None] * W + iw[None, :], mask=inside, other=0.0)
            w = tl.load(w_base + kh * KW + kw).to(tl.float32)
            # ATen skips a tap outside the input: the sum stays as it was (an inf or NaN
            # weight times the padding's 0 would otherwise reach it)
            acc = tl.where(inside, tl.fma(w, x.to(tl.float32), acc), acc)
    out = (rows < H_OUT)[:, None] & (cols < W_OUT)[None, :]
    y = y_ptr + plane * H_OUT * W_OUT + rows[:, None] * W_OUT + cols[None, :]
    tl.store(y, cast_rne(acc, y_ptr.dtype.element_ty), mask=out)


@triton.jit
def _depthwise_planes(x_ptr, w_ptr, b_ptr, y_ptr, PLANES, C_OUT, MULT, H, W, H_OUT, W_OUT,
                      SH, SW, PH, PW, DH, DW,
                      KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr,
                      BLOCK_P: tl.constexpr, BLOCK_S: tl.constexpr):
    """Small 2-D planes (``SMALL_PLANE`` outputs or fewer: MobileNet's 7x7 maps): a program
    takes ``BLOCK_P`` whole planes, their outputs flattened, the same sums as
    ``_depthwise_body`` (a tile of a 7x7 plane would leave most of its lanes idle)."""
    planes = tl.program_id(0).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    live = planes < PLANES
    c = planes % C_OUT
    in_plane = (planes // C_OUT) * (C_OUT // MULT) + c // MULT
    s = tl.arange(0, BLOCK_S)
    oh = s // W_OUT
    ow = s % W_OUT
    spots = s < H_OUT * W_OUT
    if HAS_BIAS:
        bias = tl.load(b_ptr + c, mask=live, other=0.0).to(tl.float32)
        acc = tl.zeros((BLOCK_P, BLOCK_S), dtype=tl.float32) + bias[:, None]
    else:
        acc = tl.zeros((BLOCK_P, BLOCK_S), dtype=tl.float32)
    x_base = x_ptr + in_plane[:, None] * H * W
    for kh in tl.static_range(KH):
        ih = oh * SH + (kh * DH - PH)
        for kw in tl.static_range(KW):
            iw = ow * SW + (kw * DW - PW)
            at = spots & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            inside = live[:, None] & at[None, :]
            x = tl.load(x_base + (ih * W + iw)[None, :], mask=inside, other=0.0)
            w = tl.load(w_ptr + c * (KH * KW) + (kh * KW + kw), mask=live, other=0.0)
            acc = tl.where(inside, tl.fma(w.to(tl.float32)[:, None], x.to(tl.float32), acc), acc)
    y = y_ptr + planes[:, None] * H_OUT * W_OUT + s[None, :]
    tl.store(y, cast_rne(acc, y_ptr.dtype.element_ty), mask=live[:, None] & spots[None, :])


# 2-D planes of at most this many outputs go to ``_depthwise_planes`` (under the
# interpreter a small bound, so CPU tests take both paths); a program there holds
# PLANE_TILE outputs. On an H100 (benchmarks/results/2026-12-07-h100-s29) planes of up to
# 1,024 outputs and 4,096 a program ran at 0.03-0.37x of PyTorch's kernel (a 1-D plane of
# 499, 28x28 and 7x7 planes); a 1-D convolution now always takes the row tiles.
SMALL_PLANE = 64 if INTERPRET else 256
PLANE_TILE = 64 if INTERPRET else 1024

_KEY = ["H_OUT", "W_OUT", "KH", "KW", "SH", "SW", "DH", "DW", "HAS_BIAS"]
_depthwise_2d = triton.autotune(configs=_configs(False), key=_KEY)(_depthwise_body)
_depthwise_1d = triton.autotune(configs=_configs(True), key=_KEY)(_depthwise_body)


def _pair(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    t = tuple(v) if isinstance(v, (tuple, list)) else (int(v),) * n
    if len(t) != n or not all(isinstance(i, int) for i in t):
        raise ValueError(f"expected {n} integers, got {v!r}")
    return t


def _not_covered(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 groups: int, padding: object) -> str | None:
    """Why this is not a convolution this module computes (None when it is one)."""
    if x.dim() not in (3, 4) or weight.dim() != x.dim():
        return f"a {x.dim()}-D input with a {weight.dim()}-D weight (1-D and 2-D are covered)"
    if x.dtype not in _DTYPES or weight.dtype != x.dtype or \
            (bias is not None and bias.dtype != x.dtype):
        return (f"input {x.dtype}, weight {weight.dtype}, bias "
                f"{None if bias is None else bias.dtype} (one of fp32, fp16, bf16 for all)")
    if groups <= 1 or groups != x.shape[1] or weight.shape[1] != 1 or weight.shape[0] % groups:
        # groups=1 with one channel is an ordinary convolution to PyTorch (cuDNN, TF32)
        return (f"groups={groups} for {x.shape[1]} input channels and a weight "
                f"{tuple(weight.shape)}: not depthwise (groups == in_channels > 1, "
                "[C*k, 1, ...])")
    if isinstance(padding, str) and padding not in ("same", "valid"):
        return f"padding {padding!r} (numbers, 'same' or 'valid')"
    return None


def _pytorch_runs_another_kernel(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Where PyTorch itself would not run its depthwise kernel on this input (the module
    docstring): the convolution is then left to PyTorch."""
    return (not x.is_contiguous() or (x.device.type != "cuda" and not INTERPRET)
            or x.numel() >= 2 ** 31 or weight.numel() >= 2 ** 31)


def depthwise_conv_raw(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                       dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:
    """``F.conv1d`` / ``F.conv2d(x, weight, bias, stride, padding, dilation, groups)`` of a
    depthwise convolution, ATen's sums (module docstring). Raises ``ValueError`` for a
    convolution that is not one this module covers; calls PyTorch's own function where
    PyTorch would not run its depthwise kernel either."""
    why = _not_covered(x, weight, bias, groups, padding)
    if why is not None:
        raise ValueError(f"depthwise_conv: {why}")
    one_d = x.dim() == 3
    if _pytorch_runs_another_kernel(x, weight):
        conv = F.conv1d if one_d else F.conv2d
        return conv(x, weight, bias, stride, padding, dilation, groups)
    nd = 1 if one_d else 2
    s, d = _pair(stride, nd), _pair(dilation, nd)
    k = tuple(weight.shape[2:])
    # "same": the total d * (k - 1) split as PyTorch splits it, the smaller half first
    # (an odd total pads the input's end once more: those taps are masked here, as the
    # zeros ATen pads them with add nothing); "valid": none
    p = (tuple(di * (ki - 1) // 2 for di, ki in zip(d, k)) if padding == "same"
         else (0,) * nd if padding == "valid" else _pair(padding, nd))
    if padding == "same" and any(si != 1 for si in s):
        raise ValueError("depthwise_conv: padding='same' needs stride 1 (as PyTorch's)")
    if one_d:
        s, p, d = (1, *s), (0, *p), (1, *d)
    n, c_in = x.shape[:2]
    h, w = (1, x.shape[2]) if one_d else x.shape[2:]
    kh, kw = (1, weight.shape[2]) if one_d else weight.shape[2:]
    c_out = weight.shape[0]
    h_out = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    w_out = (w + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    if padding == "same":
        h_out, w_out = h, w
    if h_out <= 0 or w_out <= 0 or min(s) <= 0 or min(d) <= 0 or min(p) < 0:
        raise ValueError(f"depthwise_conv: a {kh}x{kw} kernel (stride {s}, padding {p}, "
                         f"dilation {d}) on a {h}x{w} input gives no output")
    shape = (n, c_out, w_out) if one_d else (n, c_out, h_out, w_out)
    y = torch.empty(shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    wc = weight.contiguous()
    b = bias.contiguous() if bias is not None else wc
    if not one_d and h_out * w_out <= SMALL_PLANE:
        block_s = triton.next_power_of_2(h_out * w_out)
        block_p = max(1, PLANE_TILE // block_s)
        _depthwise_planes[(triton.cdiv(n * c_out, block_p),)](
            x, wc, b, y, n * c_out, c_out, c_out // c_in, h, w, h_out, w_out,
            s[0], s[1], p[0], p[1], d[0], d[1], KH=kh, KW=kw, HAS_BIAS=bias is not None,
            BLOCK_P=block_p, BLOCK_S=block_s, num_warps=4)
        return y
    kernel = _depthwise_1d if one_d else _depthwise_2d

    def grid(meta):
        tiles = triton.cdiv(h_out, meta["BLOCK_H"]) * triton.cdiv(w_out, meta["BLOCK_W"])
        if tiles > _MAX_TILES:
            raise ValueError(f"depthwise_conv: {tiles} tiles a plane, over CUDA's grid limit")
        return (n * c_out, tiles)

    kernel[grid](x, wc, b, y, c_out, c_out // c_in, h, w, h_out, w_out,
                 s[0], s[1], p[0], p[1], d[0], d[1], KH=kh, KW=kw, HAS_BIAS=bias is not None)
    return y


def depthwise_conv(x: torch.Tensor, conv: nn.Conv1d | nn.Conv2d) -> torch.Tensor:
    """``conv(x)`` for a depthwise ``nn.Conv1d`` / ``nn.Conv2d`` (``groups`` ==
    ``in_channels``, zero padding): its weight, bias, stride, padding and dilation read
    when called. See :func:`depthwise_conv_raw`."""
    if conv.padding_mode != "zeros":
        raise ValueError(f"depthwise_conv: padding_mode {conv.padding_mode!r} (zeros only)")
    return depthwise_conv_raw(x, conv.weight, conv.bias, conv.stride, conv.padding,
                              conv.dilation, conv.groups)
