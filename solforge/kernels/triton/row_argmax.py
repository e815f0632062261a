"""Argmax and argmin over the last dim (greedy sampling's ``logits.argmax(-1)``), as
``torch.argmax`` / ``torch.argmin``: int64 indices, the lowest index among equal extrema,
and a NaN counted as the extremum (the first NaN's index wins). Argmin is argmax of ``-x``,
negated as it is loaded (exact: negation only flips the sign bit).

Each program scans a piece of a row in tiles, keeping the running maximum, its lowest
index and the lowest NaN index. Few long rows (batch-1 to batch-64 decoding over a 128k
vocabulary) are split over several programs (``_common.row_splits``), whose pieces a
second launch combines per row: without that a single row runs on one SM.

Not covered: a dim other than the last and ``keepdim=True`` (``arg_reduce_dim`` does
those), integer inputs, empty rows (``torch.argmax`` raises on them; so does this).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, as_rows, piece_of_row, row_splits

_TILE = 128 if INTERPRET else 2048
_WARPS = 4 if INTERPRET else 8
# an index past any row: "none found"
_NONE = tl.constexpr(2 ** 62)


@triton.jit
def arg_tile_step(x, idx, best, best_idx, nan_idx):
    """One tile of a running argmax over axis 0 of ``x`` (fp32; a NaN counts as the
    maximum): ``idx`` holds each element's index along that axis (broadcast to ``x``), and
    the running maximum, its lowest index and the lowest NaN index come back updated.
    Shared by this module's row kernel and ``arg_reduce_dim``'s column kernel."""
    is_nan = x != x
    nan_idx = tl.minimum(nan_idx, tl.min(tl.where(is_nan, idx, _NONE), axis=0))
    x = tl.where(is_nan, float("-inf"), x)
    tile_best = tl.max(x, axis=0)
    tile_idx = tl.min(tl.where(x == tile_best, idx, _NONE), axis=0)
    better = tile_best > best  # equal maxima: the earlier tile's index is lower
    best_idx = tl.where(better, tile_idx, best_idx)
    best = tl.maximum(best, tile_best)
    return best, best_idx, nan_idx


@triton.jit
def _argmax_pieces_kernel(x_ptr, val_ptr, idx_ptr, out_ptr, N, stride_x, CHUNK, S,
                          BLOCK_N: tl.constexpr, FINAL: tl.constexpr, MIN: tl.constexpr):
    """Program (row, piece): the piece's maximum (of ``-x`` with ``MIN``) and its lowest
    index, or NaN and the lowest NaN index; with ``FINAL`` (one piece per row) the index is
    the result."""
    row, piece, first, x_row = piece_of_row(x_ptr, stride_x, CHUNK)
    cols = tl.arange(0, BLOCK_N)
    best = tl.full((), float("-inf"), tl.float32)
    best_idx = first  # a piece of -inf only: its first index, as torch.argmax
    nan_idx = tl.full((), _NONE, tl.int64)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        x = tl.load(x_row + idx, mask=idx < N, other=float("-inf")).to(tl.float32)
        if MIN:
            x = tl.where(idx < N, -x, float("-inf"))
        best, best_idx, nan_idx = arg_tile_step(x, idx, best, best_idx, nan_idx)
    has_nan = nan_idx < _NONE
    result = tl.where(has_nan, nan_idx, best_idx)
    if FINAL:
        tl.store(out_ptr + row, result)
    else:
        tl.store(val_ptr + row * S + piece, tl.where(has_nan, float("nan"), best))
        tl.store(idx_ptr + row * S + piece, result)


@triton.jit
def _argmax_combine_kernel(val_ptr, idx_ptr, out_ptr, S, BLOCK_S: tl.constexpr):
    """Program row: the pieces' results combined (pieces are in index order)."""
    row = tl.program_id(0).to(tl.int64)
    p = tl.arange(0, BLOCK_S)
    vals = tl.load(val_ptr + row * S + p, mask=p < S, other=float("-inf"))
    idxs = tl.load(idx_ptr + row * S + p, mask=p < S, other=_NONE)
    is_nan = vals != vals
    nan_idx = tl.min(tl.where(is_nan, idxs, _NONE), axis=0)
    vals = tl.where(is_nan, float("-inf"), vals)
    best = tl.max(vals, axis=0)
    best_idx = tl.min(tl.where(vals == best, idxs, _NONE), axis=0)
    tl.store(out_ptr + row, tl.where(nan_idx < _NONE, nan_idx, best_idx))


def argmax(x: torch.Tensor) -> torch.Tensor:
    """``x.argmax(dim=-1)`` for a floating-point ``x`` (compared in fp32, which every fp16
    and bf16 value is exactly): int64, of shape ``x.shape[:-1]``."""
    return _arg_rows(x, minimum=False)


def argmin(x: torch.Tensor) -> torch.Tensor:
    """``x.argmin(dim=-1)``, as :func:`argmax`."""
    return _arg_rows(x, minimum=True)


def _arg_rows(x: torch.Tensor, minimum: bool) -> torch.Tensor:
    what = "argmin" if minimum else "argmax"
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"{what} over the last dim needs a non-empty last dim, got shape "
                         f"{tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{what}: floating-point input only, got {x.dtype}")
    n = x.shape[-1]
    rows = as_rows(x)
    r = rows.shape[0]
    out = torch.empty(r, dtype=torch.int64, device=x.device)
    if r == 0:
        return out.view(x.shape[:-1])
    pieces, chunk = row_splits(r, n, x.device, _TILE)
    if pieces == 1:
        _argmax_pieces_kernel[(r, 1)](rows, out, out, out, n, rows.stride(0), n, 1,
                                      BLOCK_N=_TILE, FINAL=True, MIN=minimum,
                                      num_warps=_WARPS)
        return out.view(x.shape[:-1])
    vals = torch.empty((r, pieces), dtype=torch.float32, device=x.device)
    idxs = torch.empty((r, pieces), dtype=torch.int64, device=x.device)
    _argmax_pieces_kernel[(r, pieces)](rows, vals, idxs, out, n, rows.stride(0), chunk, pieces,
                                       BLOCK_N=_TILE, FINAL=False, MIN=minimum,
                                       num_warps=_WARPS)
    _argmax_combine_kernel[(r,)](vals, idxs, out, pieces,
                                 BLOCK_S=triton.next_power_of_2(pieces))
    return out.view(x.shape[:-1])
