"""Argmax and argmin over any one dim, ``keepdim`` or not, as ``torch.argmax`` /
``torch.argmin``: int64 indices, the lowest index among equal extrema, a NaN counted as the
extremum (the first NaN's index wins). Argmin is argmax of ``-x``, negated as it is loaded.

Over a dim that is not the last, ``x`` is read as ``[A, K, B]`` (``_common.reads_as_akb``:
the dims before, the reduced one, the dims after): each program takes one ``a``, a tile of
``B`` columns and walks ``K`` in ``[BLOCK_K, BLOCK_B]`` tiles, each a contiguous stretch
of memory per ``k``, keeping the running maximum, its lowest index and the lowest NaN index
per column. The tile's shape is autotuned among those that fit ``B`` (a wide ``B`` takes
wide, short tiles; a narrow one tall tiles, which are still contiguous). When ``A`` times
the column tiles are too few programs to fill the GPU and ``K`` is long (``argmax(dim=0)``
of a tall matrix), ``K`` is split over programs too (``_common.row_splits``) and a second
launch combines the pieces of each column in order. Over the last dim (or when the dims
after it are all 1) it is the row kernel's (``row_argmax``).

Not covered: ``dim=None`` (the argmax of the flattened tensor), integer and boolean
inputs, several dims at once, ``max(dim)``'s values; a ``K`` of 0 raises, as torch does.
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
    row_splits,
    sm_count,
)
from solforge.kernels.triton.row_argmax import argmax, argmin, arg_tile_step

# an index past any dim: "none found"
_NONE = tl.constexpr(2 ** 62)
# the widest column tile, and the tile (columns x rows of K) a program loads at once
_MAX_B = 32 if INTERPRET else 1024
_TILE = 128 if INTERPRET else 4096
# a piece of a K-split reads at least this many elements (128 KiB of fp32)
_MIN_PIECE = 256 if INTERPRET else 32768


def _configs() -> list[triton.Config]:
    gpu = []
    for block_b in (16, 64, 256, 1024):
        for tile, warps in ((2048, 4), (4096, 8), (8192, 8)):
            for stages in (1, 3):
                gpu.append(triton.Config({"BLOCK_B": block_b, "BLOCK_K": tile // block_b},
                                         num_warps=warps, num_stages=stages))
    return autotune_configs(gpu, triton.Config({"BLOCK_B": 16, "BLOCK_K": 8}, num_warps=4))


def _fitting(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """The configs whose column tile suits ``B``: not wider than it rounded up to a power
    of two (wasted lanes), nor under a quarter of that (a narrow tile of a wide ``B`` takes
    more programs, each with shorter contiguous stretches)."""
    want = min(triton.next_power_of_2(named_args["B"]), 1024)
    kept = [c for c in configs if want // 4 <= c.kwargs["BLOCK_B"] <= max(want, 16)]
    return kept or configs


@triton.autotune(configs=_configs(), key=["K", "B", "CHUNK_K", "FINAL"],
                 prune_configs_by={"early_config_prune": _fitting})
@triton.jit
def _arg_dim_kernel(x_ptr, val_ptr, idx_ptr, out_ptr, K, B, stride_a, stride_k, CHUNK_K, S,
                    FINAL: tl.constexpr, MIN: tl.constexpr, BLOCK_K: tl.constexpr,
                    BLOCK_B: tl.constexpr):
    """Program (a, column tile, piece of K): per column, the piece's maximum (of ``-x``
    with ``MIN``) and its lowest index, or NaN and the lowest NaN index; with ``FINAL``
    (one piece) the index is the result."""
    a = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    piece = tl.program_id(2)
    col_ok = cols < B
    first = piece.to(tl.int64) * CHUNK_K
    end = tl.minimum(first + CHUNK_K, K)
    rows = tl.arange(0, BLOCK_K)
    x_cols = x_ptr + a * stride_a + cols[None, :]
    best = tl.full((BLOCK_B,), float("-inf"), tl.float32)
    best_idx = tl.zeros((BLOCK_B,), tl.int64) + first  # a piece of -inf only: its first
    nan_idx = tl.full((BLOCK_B,), _NONE, tl.int64)
    for start in range(0, CHUNK_K, BLOCK_K):
        k = first + start + rows
        ok = (k < end)[:, None] & col_ok[None, :]
        x = tl.load(x_cols + k[:, None] * stride_k, mask=ok, other=float("-inf"))
        x = x.to(tl.float32)
        if MIN:
            x = tl.where(ok, -x, float("-inf"))
        best, best_idx, nan_idx = arg_tile_step(x, k[:, None], best, best_idx, nan_idx)
    has_nan = nan_idx < _NONE
    result = tl.where(has_nan, nan_idx, best_idx)
    if FINAL:
        tl.store(out_ptr + a * B + cols, result, mask=col_ok)
    else:
        at = (a * S + piece) * B + cols
        tl.store(val_ptr + at, tl.where(has_nan, float("nan"), best), mask=col_ok)
        tl.store(idx_ptr + at, result, mask=col_ok)


@triton.jit
def _arg_dim_combine_kernel(val_ptr, idx_ptr, out_ptr, B, S, BLOCK_B: tl.constexpr):
    """Program (a, column tile): the pieces' results combined in order (a later piece
    wins only with a strictly greater value; the first NaN's index wins)."""
    a = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    col_ok = cols < B
    best = tl.full((BLOCK_B,), float("-inf"), tl.float32)
    best_idx = tl.zeros((BLOCK_B,), tl.int64)  # all -inf: index 0, piece 0's first
    nan_idx = tl.full((BLOCK_B,), _NONE, tl.int64)
    for s in range(0, S):
        at = (a * S + s) * B + cols
        v = tl.load(val_ptr + at, mask=col_ok, other=float("-inf"))
        i = tl.load(idx_ptr + at, mask=col_ok, other=0)
        nan_idx = tl.minimum(nan_idx, tl.where(v != v, i, _NONE))
        better = v > best
        best_idx = tl.where(better, i, best_idx)
        best = tl.where(better, v, best)
    tl.store(out_ptr + a * B + cols, tl.where(nan_idx < _NONE, nan_idx, best_idx),
             mask=col_ok)


def argmax_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """``torch.argmax(x, dim, keepdim)`` for a floating-point ``x`` (compared in fp32,
    which every fp16 and bf16 value is exactly)."""
    return _arg_dim(x, dim, keepdim, minimum=False)


def argmin_dim(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """``torch.argmin(x, dim, keepdim)``, as :func:`argmax_dim`."""
    return _arg_dim(x, dim, keepdim, minimum=True)


def _arg_dim(x: torch.Tensor, dim: int, keepdim: bool, minimum: bool) -> torch.Tensor:
    what = "argmin" if minimum else "argmax"
    if not x.is_floating_point():
        raise ValueError(f"{what}: floating-point input only, got {x.dtype}")
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"{what} over dim {dim} of a tensor of shape {tuple(x.shape)}")
    d = dim % x.dim()
    a, k, b = around_dim(x.shape, d)
    kept = (*x.shape[:d], 1, *x.shape[d + 1:]) if keepdim else (*x.shape[:d], *x.shape[d + 1:])
    if k == 0:
        raise ValueError(f"{what} over an empty dim {dim} of shape {tuple(x.shape)}")
    if a * b == 0:
        return torch.empty(kept, dtype=torch.int64, device=x.device)
    if b == 1:  # the reduced dim is the last that counts: the row kernel's
        rows = x.reshape(a, k)
        return (argmin(rows) if minimum else argmax(rows)).view(kept)
    x, stride_a = as_akb(x, d)
    out = torch.empty(kept, dtype=torch.int64, device=x.device)
    pieces, chunk = _k_pieces(a, k, b, x.device)
    grid = lambda meta: (a, triton.cdiv(b, meta["BLOCK_B"]), pieces)  # noqa: E731
    if pieces == 1:
        _arg_dim_kernel[grid](x, out, out, out, k, b, stride_a, x.stride(d), k, 1,
                              FINAL=True, MIN=minimum)
        return out
    vals = torch.empty((a, pieces, b), dtype=torch.float32, device=x.device)
    idxs = torch.empty((a, pieces, b), dtype=torch.int64, device=x.device)
    _arg_dim_kernel[grid](x, vals, idxs, out, k, b, stride_a, x.stride(d), chunk, pieces,
                          FINAL=False, MIN=minimum)
    block_b = _block_b(b)
    _arg_dim_combine_kernel[(a, triton.cdiv(b, block_b))](vals, idxs, out, b, pieces,
                                                          BLOCK_B=block_b)
    return out


def _block_b(b: int) -> int:
    return min(triton.next_power_of_2(b), _MAX_B)


def _k_pieces(a: int, k: int, b: int, device: torch.device) -> tuple[int, int]:
    """(pieces, rows of K each) for the launch over ``A`` x column tiles: one piece when
    those programs are at least two per SM (KernelBench's ``[128, 4096, 4095]`` gives 512,
    about four per SM), else as many as fill the device (``row_splits``), each reading at
    least ``_MIN_PIECE`` elements."""
    block_b = _block_b(b)
    tiles = a * triton.cdiv(b, block_b)
    if tiles >= 2 * sm_count(str(device)):
        return 1, k
    return row_splits(tiles, k, device, 16, min_chunk=max(_MIN_PIECE // block_b, 16))
