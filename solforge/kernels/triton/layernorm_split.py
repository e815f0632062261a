"""LayerNorm of long rows split over several programs: two launches, fp32 statistics.

``layernorm.layer_norm`` sends a row here when it is too long for one program's registers
(over 65536 elements), or when the rows are too few to fill the GPU on their own
(``_common.row_splits``): KernelBench's ``nn.LayerNorm((64, 256, 256))`` is 16 rows of 4M
elements, 16 programs on 132 SMs if each took a row.

The first launch gives each (row, piece) program a chunk of its row: it reads the chunk
once, in tiles, and keeps the chunk's mean and sum of squared deviations (M2), each tile's
own (two passes over registers) merged into the running pair by Chan's parallel update, in
fp32. The second launch's (row, piece) programs merge the row's pieces the same way (each
program does it for itself: a few dozen numbers), then write their chunk normalised,
reading ``x``, the weight and the bias once. It walks the chunk last tile first: the first
launch read the chunks' ends last, so those are the likeliest still in L2.

Moved per element: ``x`` read twice (the second time partly from L2), the output written
once, the weight and bias read once per row (rows are the fastest grid dim, so the rows'
programs for one piece run together and share it in L2).

Not covered: one launch (the merge needs every piece of a row finished, so the second read
of ``x`` stays); returning mean and rstd for a backward; counts past 2**24 elements a row
are fp32 (a relative error of 6e-8 in the mean's divisor).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    INTERPRET,
    autotune_configs,
    cast_rne,
    piece_of_row,
)

# A piece is a multiple of the largest tile, so every config's tile divides it; the
# interpreter's tile is small, so CPU runs cross tiles and pieces.
TILE = 128 if INTERPRET else 4096

_CONFIGS = autotune_configs(
    [triton.Config({"BLOCK_N": b}, num_warps=w) for b, w in
     ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (4096, 16))],
    triton.Config({"BLOCK_N": TILE}, num_warps=4),
)


@triton.autotune(configs=_CONFIGS, key=["N", "CHUNK"])
@triton.jit
def _stats_kernel(x_ptr, mean_ptr, m2_ptr, N, stride_x, CHUNK, S, BLOCK_N: tl.constexpr):
    """Program (row, piece): the piece's mean and M2."""
    row, piece, first, x_row = piece_of_row(x_ptr, stride_x, CHUNK)
    cols = tl.arange(0, BLOCK_N)
    count = tl.full((), 0.0, tl.float32)
    mean = tl.full((), 0.0, tl.float32)
    m2 = tl.full((), 0.0, tl.float32)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        mask = idx < N
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        # the tile's own count, mean and M2; a tile past the row's end counts 0 and
        # changes nothing below
        n_t = tl.minimum(tl.maximum(N - (first + start), 0), BLOCK_N).to(tl.float32)
        mean_t = tl.sum(x, axis=0) / tl.maximum(n_t, 1.0)
        d = tl.where(mask, x - mean_t, 0.0)
        total = count + n_t
        delta = mean_t - mean
        frac = n_t / tl.maximum(total, 1.0)
        mean += delta * frac
        m2 += tl.sum(d * d, axis=0) + delta * delta * count * frac
        count = total
    tl.store(mean_ptr + row * S + piece, mean)
    tl.store(m2_ptr + row * S + piece, m2)


@triton.autotune(configs=_CONFIGS, key=["N", "CHUNK"])
@triton.jit
def _apply_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, m2_ptr, N, eps, stride_x, stride_y,
                  CHUNK, S, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                  BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr):
    """Program (row, piece): the row's mean and rstd from its pieces', then the piece
    normalised (last tile first)."""
    row, piece, first, x_row = piece_of_row(x_ptr, stride_x, CHUNK)
    p = tl.arange(0, BLOCK_S)
    ok = p < S
    means = tl.load(mean_ptr + row * S + p, mask=ok, other=0.0)
    m2s = tl.load(m2_ptr + row * S + p, mask=ok, other=0.0)
    counts = tl.minimum(tl.maximum(N - p.to(tl.int64) * CHUNK, 0), CHUNK).to(tl.float32)
    counts = tl.where(ok, counts, 0.0)
    n = N * 1.0
    mean = tl.sum(counts * means, axis=0) / n
    dev = means - mean
    rstd = tl.rsqrt(tl.sum(m2s + counts * dev * dev, axis=0) / n + eps)
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    tiles = CHUNK // BLOCK_N
    for t in range(0, tiles):
        idx = first + (tiles - 1 - t) * BLOCK_N + cols
        mask = idx < N
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y = y + tl.load(b_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + idx, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def layer_norm_pieces(rows: torch.Tensor, weight: torch.Tensor | None,
                      bias: torch.Tensor | None, eps: float, y: torch.Tensor, pieces: int,
                      chunk: int) -> None:
    """Write LayerNorm of ``rows`` ([R, N], unit column stride) into ``y`` ([R, N]),
    each row split into ``pieces`` of ``chunk`` elements (a multiple of ``TILE``);
    ``weight`` and ``bias`` are flat [N] or None."""
    if chunk % TILE:
        raise ValueError(f"a piece of {chunk} elements is not a multiple of the tile {TILE}")
    r, n = rows.shape
    mean = torch.empty((r, pieces), dtype=torch.float32, device=rows.device)
    m2 = torch.empty_like(mean)
    grid = (r, pieces)
    _stats_kernel[grid](rows, mean, m2, n, rows.stride(0), chunk, pieces)
    _apply_kernel[grid](rows, weight if weight is not None else rows,
                        bias if bias is not None else rows, y, mean, m2, n, eps,
                        rows.stride(0), y.stride(0), chunk, pieces,
                        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
                        BLOCK_S=triton.next_power_of_2(pieces))
