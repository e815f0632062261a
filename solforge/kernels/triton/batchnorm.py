"""Batch norm (training or running statistics), with an optional residual and ReLU after it.

``batch_norm_act(x, bn, relu=..., residual=..., residual_bn=...)`` computes

    out = relu?( bn(x) [+ residual | + residual_bn(residual)] )

for an ``nn.BatchNorm1d/2d/3d`` ``bn`` (or any object with its attributes:
:class:`BatchNormLike`), read when called, so a module switched to ``.eval()`` later is
followed. ``x`` is ``[N, C]`` or ``[N, C, *spatial]``, read as ``[N, C, S]``: a channel's
data is ``N`` slabs of ``S`` contiguous elements ``C * S`` apart.

The module's own semantics, as ``_BatchNorm.forward`` then ``F.batch_norm`` apply them:
while training, the batch's mean and biased variance over every dim but C normalise ``x``,
``num_batches_tracked`` is incremented (when tracked), and the running buffers are updated
in place, ``running = (1 - f) * running + f * stat`` with the unbiased variance
(``n / (n - 1)``) and ``f`` the momentum, or ``1 / num_batches_tracked`` when the momentum
is None (the cumulative average; reading the count is a host sync, as in PyTorch). In eval
mode the running buffers normalise ``x`` (batch statistics when the module tracks none);
affine or not.

Three launches per batch norm: statistics, then a per-channel finish, then one elementwise
pass for the whole expression.

- statistics: programs (channel block, piece) each read a piece of their channels' slabs in
  tiles ``[BLOCK_N, BLOCK_C, BLOCK_S]`` (``S`` contiguous, or for small ``S`` a block of
  channels and rows), and keep count, mean and M2 per channel: each tile's own (two passes
  over registers), merged into the running ones by Chan's parallel update, in fp32.
- finish (one program per channel block): the pieces merged the same way (a weighted mean,
  then ``sum(M2_i + n_i (mean_i - mean)^2)``), the running buffers updated, and
  ``mean``, ``w * rstd`` and ``b`` written per channel (the running buffers' instead in
  eval mode).
- apply: ``(x - mean) * (w * rstd) + b``, plus the residual (``residual`` read as it is,
  or normalised by ``residual_bn``'s own coefficients, its statistics computed the same
  way), then ``max(., 0)`` (NaN stays NaN, as ``torch.relu``). ``x`` is read twice (once
  for statistics), the output written once: a ResNet block's ``relu(bn2(conv2) +
  bn_d(conv_d))`` is 5 passes over the activation where eager takes about 10.

Measured on an H100 (torch 2.11, Triton 3.6; ``benchmarks/gpu/batchnorm_probe.py``), fp32
10 x 64 x 224 x 224 in training: batch norm + ReLU 0.225 ms against eager's 0.363; the
two-batch-norm residual form 0.358 ms against 0.772; eval mode 0.149 against 0.222. The
statistics launch alone takes 0.146 ms (880 GB/s), so the apply pass runs at about 3 TB/s
by difference; the statistics are the part left to tune (untested guess: the block
reduction each tile does between its loads; per-lane Welford, reduced once, would avoid it).

16-bit inputs: statistics and arithmetic in fp32; each normalised value is rounded to the
input dtype before the residual add and the sum rounded again, as eager's separate
operations round (``bn(x)`` then ``+``). The statistics differ from PyTorch's by fp32
summation order only.

Not covered: results bit-identical to PyTorch's (cuDNN's) batch norm: they are within
about 1e-6, which a TF32 convolution reading them can turn into 1e-4 (the search pattern
leaves such fp32 batch norms alone); channels-last (or otherwise non-contiguous) inputs are copied to contiguous
NC[D]HW first, and the output is contiguous (PyTorch keeps channels-last); a backward
(nothing is saved; buffers update as under ``torch.no_grad``); ``SyncBatchNorm``'s
cross-process statistics; other activations than ReLU; parameters and buffers on another
device than ``x``; a ``residual`` of another shape or dtype than ``x`` (no broadcast).
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, cast_rne, sm_count

# A tile holds this many elements (fp32 registers: 16 a thread at 4 warps); a block of
# channels at most CHANNELS_MAX, so small-S tiles still read rows of contiguous channels.
# Under the interpreter both are small, so CPU runs cross tiles in every dim.
TILE = 32 if INTERPRET else 2048
CHANNELS_MAX = 8 if INTERPRET else 128
# statistics programs a launch aims at, per SM: a streaming read wants many in flight
STATS_PER_SM = 4 if INTERPRET else 16
FINISH_BLOCK_C = 8 if INTERPRET else 64
FINISH_BLOCK_P = 4 if INTERPRET else 64

_RESIDUAL = {"none": 0, "tensor": 1, "batch_norm": 2}


class BatchNormLike(Protocol):
    """What :func:`batch_norm_act` reads of a batch norm: ``nn.BatchNorm1d/2d/3d`` have it."""

    weight: torch.Tensor | None
    bias: torch.Tensor | None
    running_mean: torch.Tensor | None
    running_var: torch.Tensor | None
    num_batches_tracked: torch.Tensor | None
    momentum: float | None
    eps: float
    training: bool
    track_running_stats: bool


@triton.jit
def _stats_kernel(x_ptr, mean_ptr, m2_ptr, cnt_ptr, N, C, S, CS, TILES_S, PER_PIECE,
                  BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr):
    """Program (channel block, piece): count, mean and M2 of its channels over tiles
    ``[piece * PER_PIECE, (piece + 1) * PER_PIECE)`` of the (row block, S tile) space."""
    cb = tl.program_id(0)
    piece = tl.program_id(1)
    cs = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    rn = tl.arange(0, BLOCK_N)
    rs = tl.arange(0, BLOCK_S)
    count = tl.full((), 0.0, tl.float32)
    mean = tl.zeros((BLOCK_C,), tl.float32)
    m2 = tl.zeros((BLOCK_C,), tl.float32)
    for i in range(0, PER_PIECE):
        t = piece * PER_PIECE + i
        nb = t // TILES_S
        st = t - nb * TILES_S
        ns = nb * BLOCK_N + rn
        ss = st * BLOCK_S + rs
        # a tile past the last one has nb beyond the rows: all masked, counted 0
        mask = (ns < N)[:, None, None] & c_ok[None, :, None] & (ss < S)[None, None, :]
        offs = (ns.to(tl.int64) * CS)[:, None, None] + (cs.to(tl.int64) * S)[None, :, None] \
            + ss[None, None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        vn = tl.minimum(tl.maximum(N - nb * BLOCK_N, 0), BLOCK_N)
        vs = tl.minimum(tl.maximum(S - st * BLOCK_S, 0), BLOCK_S)
        n_t = (vn * vs).to(tl.float32)
        mean_t = tl.sum(tl.sum(x, axis=2), axis=0) / tl.maximum(n_t, 1.0)
        d = tl.where(mask, x - mean_t[None, :, None], 0.0)
        m2_t = tl.sum(tl.sum(d * d, axis=2), axis=0)
        total = count + n_t
        delta = mean_t - mean
        frac = n_t / tl.maximum(total, 1.0)
        mean += delta * frac
        m2 += m2_t + delta * delta * count * frac
        count = total
    out = piece * C + cs
    tl.store(mean_ptr + out, mean, mask=c_ok)
    tl.store(m2_ptr + out, m2, mask=c_ok)
    tl.store(cnt_ptr + out, tl.zeros((BLOCK_C,), tl.float32) + count, mask=c_ok)


@triton.jit
def _finish_kernel(mean_ptr, m2_ptr, cnt_ptr, w_ptr, b_ptr, rm_ptr, rv_ptr, coef_ptr,
                   C, P, n, eps, factor, unbias,
                   BATCH_STATS: tl.constexpr, UPDATE: tl.constexpr, HAS_W: tl.constexpr,
                   HAS_B: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    """Program (channel block): the channels' mean and variance (the pieces merged, or the
    running buffers), the running buffers updated, and ``[mean; w * rstd; b]`` written."""
    cs = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    if BATCH_STATS:
        ps = tl.arange(0, BLOCK_P)
        acc = tl.zeros((BLOCK_C,), tl.float32)
        for p0 in range(0, P, BLOCK_P):
            ok = ((p0 + ps) < P)[:, None] & c_ok[None, :]
            idx = (p0 + ps)[:, None] * C + cs[None, :]
            cnt = tl.load(cnt_ptr + idx, mask=ok, other=0.0)
            acc += tl.sum(cnt * tl.load(mean_ptr + idx, mask=ok, other=0.0), axis=0)
        mean = acc / n
        acc = tl.zeros((BLOCK_C,), tl.float32)
        for p0 in range(0, P, BLOCK_P):
            ok = ((p0 + ps) < P)[:, None] & c_ok[None, :]
            idx = (p0 + ps)[:, None] * C + cs[None, :]
            cnt = tl.load(cnt_ptr + idx, mask=ok, other=0.0)
            dev = tl.load(mean_ptr + idx, mask=ok, other=0.0) - mean[None, :]
            acc += tl.sum(tl.load(m2_ptr + idx, mask=ok, other=0.0) + cnt * dev * dev,
                          axis=0)
        var = acc / n
        if UPDATE:
            rm = tl.load(rm_ptr + cs, mask=c_ok, other=0.0)
            rv = tl.load(rv_ptr + cs, mask=c_ok, other=0.0)
            new_m = factor * mean + (1.0 - factor) * rm.to(tl.float32)
            new_v = factor * (var * unbias) + (1.0 - factor) * rv.to(tl.float32)
            tl.store(rm_ptr + cs, new_m.to(rm.dtype), mask=c_ok)
            tl.store(rv_ptr + cs, new_v.to(rv.dtype), mask=c_ok)
    else:
        mean = tl.load(rm_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
        var = tl.load(rv_ptr + cs, mask=c_ok, other=1.0).to(tl.float32)
    scale = tl.rsqrt(var + eps)
    if HAS_W:
        scale = scale * tl.load(w_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
    shift = tl.zeros((BLOCK_C,), tl.float32)
    if HAS_B:
        shift += tl.load(b_ptr + cs, mask=c_ok, other=0.0).to(tl.float32)
    tl.store(coef_ptr + cs, mean, mask=c_ok)
    tl.store(coef_ptr + C + cs, scale, mask=c_ok)
    tl.store(coef_ptr + 2 * C + cs, shift, mask=c_ok)


@triton.jit
def _normalised(ptr, coef_ptr, offs, mask, cs, c_ok, C):
    x = tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.load(coef_ptr + cs, mask=c_ok, other=0.0)[None, :, None]
    scale = tl.load(coef_ptr + C + cs, mask=c_ok, other=0.0)[None, :, None]
    shift = tl.load(coef_ptr + 2 * C + cs, mask=c_ok, other=0.0)[None, :, None]
    return (x - mean) * scale + shift


@triton.jit
def _as_io(y, dtype: tl.constexpr):
    """``y`` rounded to the input dtype and back (eager's rounding between operations);
    nothing in fp32."""
    if dtype != tl.float32:
        y = cast_rne(y, dtype).to(tl.float32)
    return y


@triton.jit
def _apply_kernel(x_ptr, coef_ptr, r_ptr, rcoef_ptr, y_ptr, N, C, S, CS,
                  RESIDUAL: tl.constexpr, RELU: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr):
    """Program (row block, channel block, S tile): the tile's output."""
    ns = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ss = tl.program_id(2) * BLOCK_S + tl.arange(0, BLOCK_S)
    c_ok = cs < C
    mask = (ns < N)[:, None, None] & c_ok[None, :, None] & (ss < S)[None, None, :]
    offs = (ns.to(tl.int64) * CS)[:, None, None] + (cs.to(tl.int64) * S)[None, :, None] \
        + ss[None, None, :]
    y = _normalised(x_ptr, coef_ptr, offs, mask, cs, c_ok, C)
    if RESIDUAL == 1:
        r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = _as_io(y, y_ptr.dtype.element_ty) + r
    elif RESIDUAL == 2:
        r = _normalised(r_ptr, rcoef_ptr, offs, mask, cs, c_ok, C)
        y = _as_io(y, y_ptr.dtype.element_ty) + _as_io(r, y_ptr.dtype.element_ty)
    if RELU:
        y = tl.where(y < 0.0, 0.0, y)
    tl.store(y_ptr + offs, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def _blocks(n: int, c: int, s: int) -> tuple[int, int, int]:
    """``(BLOCK_N, BLOCK_C, BLOCK_S)``: contiguous S first, then channels, then rows."""
    bs = min(triton.next_power_of_2(s), TILE)
    bc = min(triton.next_power_of_2(c), max(TILE // bs, 1), CHANNELS_MAX)
    bn = min(triton.next_power_of_2(n), max(TILE // (bs * bc), 1))
    return bn, bc, bs


def _as_ncs(x: torch.Tensor) -> tuple[torch.Tensor, int, int, int]:
    if x.dim() < 2:
        raise ValueError(f"batch norm of an input of shape {tuple(x.shape)}: expected "
                         "[N, C] or [N, C, *spatial]")
    n, c, s = x.shape[0], x.shape[1], math.prod(x.shape[2:])
    return x.contiguous(), n, c, s


def _coefficients(x: torch.Tensor, bn: BatchNormLike, n: int, c: int, s: int
                  ) -> torch.Tensor:
    """``[mean; w * rstd; b]`` per channel (fp32, ``[3, C]``) for ``bn`` applied to the
    contiguous ``x``, with the module's side effects (count and running buffers) done."""
    training = bool(bn.training)
    rm, rv = bn.running_mean, bn.running_var
    track = bool(getattr(bn, "track_running_stats", rm is not None))
    factor = 0.0 if bn.momentum is None else float(bn.momentum)
    if training and track and bn.num_batches_tracked is not None:
        bn.num_batches_tracked.add_(1)
        if bn.momentum is None:  # cumulative average (a host read, as PyTorch's)
            factor = 1.0 / float(bn.num_batches_tracked)
    if training and not track:
        rm = rv = None
    batch_stats = training or (rm is None and rv is None)
    count = n * s
    if batch_stats and count == 1:
        raise ValueError("Expected more than 1 value per channel when training, got input "
                         f"size {torch.Size([n, c, *([s] if s != 1 else [])])}")
    for name, t in (("weight", bn.weight), ("bias", bn.bias), ("running_mean", rm),
                    ("running_var", rv)):
        if t is not None and t.shape != (c,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected ({c},)")
    coef = torch.empty((3, c), dtype=torch.float32, device=x.device)
    stats = [coef] * 3  # unused pointers when the running buffers normalise
    pieces = 1
    if batch_stats:
        bn_, bc, bs = _blocks(n, c, s)
        tiles_s = triton.cdiv(s, bs)
        tiles = triton.cdiv(n, bn_) * tiles_s
        cblocks = triton.cdiv(c, bc)
        target = STATS_PER_SM * sm_count(str(x.device))
        per = triton.cdiv(tiles, max(1, min(tiles, triton.cdiv(target, cblocks))))
        pieces = triton.cdiv(tiles, per)
        stats = [torch.empty((pieces, c), dtype=torch.float32, device=x.device)
                 for _ in range(3)]
        _stats_kernel[(cblocks, pieces)](x, *stats, n, c, s, c * s, tiles_s, per,
                                         BLOCK_N=bn_, BLOCK_C=bc, BLOCK_S=bs, num_warps=4)
    update = batch_stats and rm is not None and rv is not None
    _finish_kernel[(triton.cdiv(c, FINISH_BLOCK_C),)](
        *stats, bn.weight if bn.weight is not None else coef,
        bn.bias if bn.bias is not None else coef,
        rm if rm is not None else coef, rv if rv is not None else coef, coef,
        c, pieces, float(count), float(bn.eps), factor,
        count / (count - 1) if count > 1 else float("inf"),
        BATCH_STATS=batch_stats, UPDATE=update, HAS_W=bn.weight is not None,
        HAS_B=bn.bias is not None, BLOCK_P=FINISH_BLOCK_P, BLOCK_C=FINISH_BLOCK_C)
    return coef


def batch_norm_act(x: torch.Tensor, bn: BatchNormLike, *, relu: bool = False,
                   residual: torch.Tensor | None = None,
                   residual_bn: BatchNormLike | None = None) -> torch.Tensor:
    """``relu?(bn(x) + residual_bn?(residual))`` with ``bn``'s side effects (see the module
    docstring); ``residual`` (optional) has ``x``'s shape and dtype; ``residual_bn``
    normalises it first. Output in ``x``'s dtype, contiguous."""
    if residual_bn is not None and residual is None:
        raise ValueError("residual_bn normalises the residual: pass residual= too")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual of shape {tuple(residual.shape)} and {residual.dtype}; "
                         f"expected x's {tuple(x.shape)} and {x.dtype}")
    xc, n, c, s = _as_ncs(x)
    if xc.numel() == 0:
        raise ValueError(f"batch norm of an empty input ({tuple(x.shape)}) is not covered")
    coef = _coefficients(xc, bn, n, c, s)
    r, rcoef, kind = xc, coef, "none"
    if residual is not None:
        r, kind = residual.contiguous(), "tensor"
        if residual_bn is not None:
            rcoef, kind = _coefficients(r, residual_bn, n, c, s), "batch_norm"
    y = torch.empty((n, c, s), dtype=x.dtype, device=x.device)
    bn_, bc, bs = _blocks(n, c, s)
    grid = (triton.cdiv(n, bn_), triton.cdiv(c, bc), triton.cdiv(s, bs))
    _apply_kernel[grid](xc, coef, r, rcoef, y, n, c, s, c * s, RESIDUAL=_RESIDUAL[kind],
                        RELU=bool(relu), BLOCK_N=bn_, BLOCK_C=bc, BLOCK_S=bs, num_warps=4)
    return y.view(x.shape)
