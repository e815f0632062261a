"""Row softmax and log-softmax over the last dim with fp32 math, any input dtype, any output
dtype.

Rows that fit one tile (up to 8192 elements on a GPU) are read once and kept in registers;
longer rows (vocabularies) take two passes: an online max/sum, then the normalised write.
When there are too few long rows to fill the GPU (batch-1 to batch-64 sampling over a
128k vocabulary), each row is split over several programs (``_common.row_splits``): the
first launch writes each piece's max and sum, the second combines a row's pieces and
writes that piece normalised. A tile or piece that is all -inf (masked logits) adds
nothing to the sum; a row that is all -inf comes out NaN, as PyTorch's does. Log-softmax is
the same passes with ``x - max - log(sum)`` written (``LOG``).

Not covered: a dim other than the last; masks or scaling fused in (apply them to the
input).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    INTERPRET,
    as_rows,
    autotune_configs,
    cast_rne,
    piece_of_row,
    row_splits,
)

# The interpreter's tile is small so CPU runs exercise the multi-tile path too.
_MAX_TILE = 128 if INTERPRET else 8192

_CONFIGS = autotune_configs(
    [triton.Config({}, num_warps=w) for w in (4, 8, 16)],
    triton.Config({}, num_warps=4),
)


@triton.jit
def _online_update(m, total, x):
    """The running (max, sum of exp(x - max)) after tile ``x``; a tile that is all -inf
    while the max is still -inf leaves (-inf, 0) rather than NaN."""
    m_new = tl.maximum(m, tl.max(x, axis=0))
    safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, total * tl.exp(m - safe) + tl.sum(tl.exp(x - safe), axis=0)


@triton.autotune(configs=_CONFIGS, key=["N"])
@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, stride_x, stride_y,
                    BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr, LOG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    if ONE_TILE:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        e = tl.exp(shifted)
        if LOG:
            y = shifted - tl.log(tl.sum(e, axis=0))
        else:
            y = e * (1.0 / tl.sum(e, axis=0))
        tl.store(y_row + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.full((), float("-inf"), tl.float32)
        total = tl.full((), 0.0, tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            m, total = _online_update(m, total, x)
        inv = 1.0 / total
        log_total = tl.log(total)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            if LOG:
                y = x - m - log_total
            else:
                y = tl.exp(x - m) * inv
            tl.store(y_row + start + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


# the tile of the split kernels (a piece is a multiple of it)
_SPLIT_TILE = 128 if INTERPRET else 2048
_SPLIT_WARPS = 4 if INTERPRET else 8


@triton.jit
def _softmax_pieces_kernel(x_ptr, m_ptr, l_ptr, N, stride_x, CHUNK, S,
                           BLOCK_N: tl.constexpr):
    """Program (row, piece): the piece's max and sum of exp(x - max)."""
    row, piece, first, x_row = piece_of_row(x_ptr, stride_x, CHUNK)
    cols = tl.arange(0, BLOCK_N)
    m = tl.full((), float("-inf"), tl.float32)
    total = tl.full((), 0.0, tl.float32)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        x = tl.load(x_row + idx, mask=idx < N, other=float("-inf")).to(tl.float32)
        m, total = _online_update(m, total, x)
    tl.store(m_ptr + row * S + piece, m)
    tl.store(l_ptr + row * S + piece, total)


@triton.jit
def _softmax_pieces_write_kernel(x_ptr, y_ptr, m_ptr, l_ptr, N, stride_x, stride_y, CHUNK,
                                 S, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                                 LOG: tl.constexpr):
    """Program (row, piece): the row's max and sum from its pieces', then the piece
    normalised."""
    row, piece, first, x_row = piece_of_row(x_ptr, stride_x, CHUNK)
    p = tl.arange(0, BLOCK_S)
    ms = tl.load(m_ptr + row * S + p, mask=p < S, other=float("-inf"))
    ls = tl.load(l_ptr + row * S + p, mask=p < S, other=0.0)
    m = tl.max(ms, axis=0)
    safe = tl.where(m == float("-inf"), 0.0, m)
    total = tl.sum(ls * tl.exp(ms - safe), axis=0)
    inv = 1.0 / total
    log_total = tl.log(total)
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        mask = idx < N
        x = tl.load(x_row + idx, mask=mask, other=float("-inf")).to(tl.float32)
        if LOG:
            y = x - safe - log_total
        else:
            y = tl.exp(x - m) * inv
        tl.store(y_row + idx, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``softmax(x, dim=-1)`` computed in fp32, written as ``out_dtype`` (default ``x``'s).

    ``softmax(s, out_dtype=torch.float32)`` is ``s.softmax(-1, dtype=torch.float32)``;
    ``softmax(s)`` on bf16 scores is HF's ``softmax(s, dtype=float32).to(s.dtype)``.
    """
    return _rows(x, out_dtype, log=False)


def log_softmax(x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``log_softmax(x, dim=-1)`` computed in fp32 (``x - max - log(sum(exp(x - max)))``),
    written as ``out_dtype`` (default ``x``'s): KernelBench's LogSoftmax, a loss's
    log-probabilities over a vocabulary."""
    return _rows(x, out_dtype, log=True)


def _rows(x: torch.Tensor, out_dtype: torch.dtype | None, log: bool) -> torch.Tensor:
    n = x.shape[-1]
    rows = as_rows(x)
    y = torch.empty(rows.shape, dtype=out_dtype or x.dtype, device=x.device)
    if not (rows.shape[0] and n):
        return y.view(x.shape)
    # rows past one tile take two passes anyway: splitting them costs only the pieces' sums
    pieces, chunk = (row_splits(rows.shape[0], n, x.device, _SPLIT_TILE) if n > _MAX_TILE
                     else (1, n))
    if pieces > 1:
        m = torch.empty((rows.shape[0], pieces), dtype=torch.float32, device=x.device)
        total = torch.empty_like(m)
        grid = (rows.shape[0], pieces)
        _softmax_pieces_kernel[grid](rows, m, total, n, rows.stride(0), chunk, pieces,
                                     BLOCK_N=_SPLIT_TILE, num_warps=_SPLIT_WARPS)
        _softmax_pieces_write_kernel[grid](rows, y, m, total, n, rows.stride(0), y.stride(0),
                                           chunk, pieces, BLOCK_N=_SPLIT_TILE,
                                           BLOCK_S=triton.next_power_of_2(pieces),
                                           LOG=log, num_warps=_SPLIT_WARPS)
    else:
        block = min(triton.next_power_of_2(n), _MAX_TILE)
        _softmax_kernel[(rows.shape[0],)](rows, y, n, rows.stride(0), y.stride(0),
                                          BLOCK_N=block, ONE_TILE=n <= block, LOG=log)
    return y.view(x.shape)
