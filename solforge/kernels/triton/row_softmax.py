"""Row softmax over the last dim with fp32 math, any input dtype, any output dtype.

Rows that fit one tile (up to 8192 elements on a GPU) are read once and kept in registers;
longer rows (vocabularies) take two passes: an online max/sum, then the normalised write.

Not covered: a dim other than the last; masks or scaling fused in (apply them to the
input); splitting one row over several programs, so a single very long row (batch-1
sampling over a 128k vocabulary) runs on one SM.
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
)

# The interpreter's tile is small so CPU runs exercise the multi-tile path too.
_MAX_TILE = 128 if INTERPRET else 8192

_CONFIGS = autotune_configs(
    [triton.Config({}, num_warps=w) for w in (4, 8, 16)],
    triton.Config({}, num_warps=4),
)


@triton.autotune(configs=_CONFIGS, key=["N"])
@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, stride_x, stride_y,
                    BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    if ONE_TILE:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e * (1.0 / tl.sum(e, axis=0))
        tl.store(y_row + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.full((), float("-inf"), tl.float32)
        total = tl.full((), 0.0, tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            total = total * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        inv = 1.0 / total
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            y = tl.exp(x - m) * inv
            tl.store(y_row + start + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``softmax(x, dim=-1)`` computed in fp32, written as ``out_dtype`` (default ``x``'s).

    ``softmax(s, out_dtype=torch.float32)`` is ``s.softmax(-1, dtype=torch.float32)``;
    ``softmax(s)`` on bf16 scores is HF's ``softmax(s, dtype=float32).to(s.dtype)``.
    """
    n = x.shape[-1]
    rows = as_rows(x)
    y = torch.empty(rows.shape, dtype=out_dtype or x.dtype, device=x.device)
    if rows.shape[0] and n:
        block = min(triton.next_power_of_2(n), _MAX_TILE)
        _softmax_kernel[(rows.shape[0],)](rows, y, n, rows.stride(0), y.stride(0),
                                          BLOCK_N=block, ONE_TILE=n <= block)
    return y.view(x.shape)
