"""A tensor divided by a statistic of one dim that is not the last: the normalisations over
channels of ``[N, C, H, W]`` activations and over a middle dim of any tensor.

- ``"rms"``: ``x / sqrt(mean(x ** 2, dim, keepdim=True) + eps)`` (RMS normalisation over
  channels without a weight; KernelBench's 36_RMSNorm_);
- ``"l2"``: ``x / torch.norm(x, p=2, dim=dim, keepdim=True)``, and with ``eps > 0``
  ``F.normalize(x, p=2, dim=dim, eps=eps)``: ``x / max(norm, eps)``;
- ``"mean_abs"``: ``x / x.abs().mean(dim, keepdim=True)``.

``x`` is read as ``[A, K, B]`` (``_common.reads_as_akb``: the dims before ``dim``, ``dim``
itself, the dims after it). Each program takes one ``a`` and a tile of ``B`` columns. When
the whole ``K`` fits one tile (``K`` up to ``_ONE_TILE_K``, the channel counts of
convolutional nets) the program reads its ``[K, BLOCK_B]`` tile once, reduces it over
``K`` in registers and writes it divided: one read and one write of ``x``, where eager
PyTorch makes five passes over it (the square, the mean, the division and their
temporaries). A longer ``K`` is walked twice in ``[BLOCK_K, BLOCK_B]`` tiles, the second
walk reading the tiles again (from L2 when they still are there).
KernelBench's 36_RMSNorm_ (112x64x512x512 fp32 over dim 1) on an H200: 3.82 ms, about 92%
of the calibrated DRAM bandwidth for its read and write, against torch.compile's 3.94 ms
and eager's 11.6 (benchmarks/results/2026-12-06-h200-s26).

Roundings are PyTorch's, for every float dtype: the statistic is accumulated in fp32 and
each step PyTorch rounds to ``x``'s dtype is rounded here too (``x ** 2`` per element for
``"rms"``, so an fp16 square past 65504 is ``inf`` as it is in eager; the mean; ``+ eps``;
the square root; the ``max`` with ``eps``), then ``x`` is divided by it in fp32 and the
quotient (IEEE division) rounded. A slice of zeros gives NaN (0 / 0) as PyTorch's does; a
NaN anywhere in a slice makes that slice's outputs NaN.

Not covered: the last dim (the row kernels of ``row_norm.py`` read long rows contiguously;
this layout would walk ``K`` with a stride of 1 column); several dims at once; a weight or
bias (``rms_norm`` and ``layer_norm`` take those over the last dim); ``p`` other than 2;
integer inputs; ``K`` of 0 (raises). The sum runs in fp32 in a different order from
PyTorch's, so fp32 results may differ in the last bits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    as_akb,
    INTERPRET,
    around_dim,
    autotune_configs,
    cast_rne,
)

NORMS = {"rms": 0, "l2": 1, "mean_abs": 2}
# the longest K read as one register tile; a tile holds at most _TILE elements
_ONE_TILE_K = 16 if INTERPRET else 128
_TILE = 512 if INTERPRET else 8192


def _prune(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """The column tiles that keep ``BLOCK_K x BLOCK_B`` within ``_TILE`` and are not much
    wider than ``B`` (wasted lanes); at least the narrowest."""
    block_k = kwargs.get("BLOCK_K", named_args.get("BLOCK_K"))
    want = triton.next_power_of_2(named_args["B"])
    kept = [c for c in configs
            if block_k * c.kwargs["BLOCK_B"] <= _TILE and c.kwargs["BLOCK_B"] <= max(want, 32)]
    return kept or [min(configs, key=lambda c: c.kwargs["BLOCK_B"])]


@triton.jit
def _term(v, NORM: tl.constexpr, dt: tl.constexpr):
    """One element's share of the statistic: ``x ** 2`` rounded to the dtype (rms), ``x ** 2``
    (l2: torch.norm squares in fp32), ``|x|``."""
    if NORM == 0:
        return cast_rne(v * v, dt).to(tl.float32)
    elif NORM == 1:
        return v * v
    else:
        return tl.abs(v)


@triton.jit
def _divisor(total, inv_k, eps, NORM: tl.constexpr, dt: tl.constexpr):
    """The rounded divisor from the fp32 sum of the terms, each step rounded as PyTorch's
    (its CUDA mean multiplies the sum by ``1 / K``)."""
    if NORM == 0:
        mean = cast_rne(total * inv_k, dt).to(tl.float32)
        shifted = cast_rne(mean + eps, dt).to(tl.float32)
        return cast_rne(tl.sqrt_rn(shifted), dt).to(tl.float32)
    elif NORM == 1:
        norm = cast_rne(tl.sqrt_rn(total), dt).to(tl.float32)
        # F.normalize's clamp_min(eps): NaN stays NaN (a comparison with NaN is false)
        return cast_rne(tl.where(norm < eps, eps, norm), dt).to(tl.float32)
    else:
        return cast_rne(total * inv_k, dt).to(tl.float32)


@triton.autotune(
    configs=autotune_configs(
        [triton.Config({"BLOCK_B": bb}, num_warps=w)
         for bb, w in ((32, 2), (64, 4), (128, 4), (256, 4), (256, 8), (512, 8))],
        triton.Config({"BLOCK_B": 16}, num_warps=4)),
    key=["K", "B", "NORM", "BLOCK_K"],
    prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _dim_norm_kernel(x_ptr, y_ptr, K, B, stride_a, stride_k, inv_k, eps, NORM: tl.constexpr,
                     BLOCK_K: tl.constexpr, ONE_TILE: tl.constexpr, BLOCK_B: tl.constexpr):
    a = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    ks = tl.arange(0, BLOCK_K)
    col_ok = cols < B
    x_at = x_ptr + a * stride_a + cols[None, :]
    y_at = y_ptr + a * K * B + cols[None, :]  # y is contiguous
    dt = y_ptr.dtype.element_ty
    if ONE_TILE:
        ok = (ks < K)[:, None] & col_ok[None, :]
        v = tl.load(x_at + ks[:, None].to(tl.int64) * stride_k, mask=ok, other=0.0)
        v = v.to(tl.float32)
        d = _divisor(tl.sum(_term(v, NORM, dt), axis=0), inv_k, eps, NORM, dt)
        d = tl.where(col_ok, d, 1.0)  # no 0 / 0 in the columns past B
        y = cast_rne(tl.div_rn(v, d[None, :]), dt)
        tl.store(y_at + ks[:, None].to(tl.int64) * B, y, mask=ok)
    else:
        total = tl.zeros((BLOCK_B,), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            kk = (k0 + ks).to(tl.int64)
            ok = (kk < K)[:, None] & col_ok[None, :]
            v = tl.load(x_at + kk[:, None] * stride_k, mask=ok, other=0.0).to(tl.float32)
            total += tl.sum(_term(v, NORM, dt), axis=0)
        d = tl.where(col_ok, _divisor(total, inv_k, eps, NORM, dt), 1.0)
        for k0 in range(0, K, BLOCK_K):
            kk = (k0 + ks).to(tl.int64)
            ok = (kk < K)[:, None] & col_ok[None, :]
            v = tl.load(x_at + kk[:, None] * stride_k, mask=ok, other=0.0).to(tl.float32)
            tl.store(y_at + kk[:, None] * B, cast_rne(tl.div_rn(v, d[None, :]), dt), mask=ok)


def div_by_dim_norm(x: torch.Tensor, dim: int, norm: str, eps: float = 0.0) -> torch.Tensor:
    """``x`` divided by its ``norm`` statistic over ``dim`` (not the last; see the module
    docstring for ``"rms"``, ``"l2"`` and ``"mean_abs"`` and for what ``eps`` does in each),
    in ``x``'s dtype and shape."""
    if norm not in NORMS:
        raise ValueError(f"div_by_dim_norm: unknown norm {norm!r}; use one of "
                         f"{', '.join(NORMS)}")
    if not x.is_floating_point():
        raise ValueError(f"div_by_dim_norm: floating-point input only, got {x.dtype}")
    d = dim % x.dim() if x.dim() else 0
    a, k, b = around_dim(x.shape, d) if x.dim() else (1, 1, 1)
    if x.dim() < 2 or b == 1 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"div_by_dim_norm normalises over a dim with others after it; got "
                         f"dim={dim} of shape {tuple(x.shape)} (over the last dim use "
                         "div_by_row_norm)")
    if k == 0:
        raise ValueError(f"div_by_dim_norm: dim {dim} of shape {tuple(x.shape)} is empty")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    x, stride_a = as_akb(x, d)
    one_tile = k <= _ONE_TILE_K
    block_k = triton.next_power_of_2(k) if one_tile else (4 if INTERPRET else 16)
    grid = lambda meta: (a, triton.cdiv(b, meta["BLOCK_B"]))  # noqa: E731
    _dim_norm_kernel[grid](x, y, k, b, stride_a, x.stride(d), 1.0 / k, float(eps),
                           NORM=NORMS[norm], BLOCK_K=block_k, ONE_TILE=one_tile)
    return y
