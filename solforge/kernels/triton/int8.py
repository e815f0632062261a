"""Dynamic per-token symmetric int8 quantization (SmoothQuant W8A8, vLLM ``scaled_int8_quant``).

Per row: ``s = amax / 127``, ``q = clamp(round(x * (127 / amax)), -128, 127)`` with round
half to even, as vLLM's reference computes it.

Not covered: static scales; asymmetric (zero-point) quantization; rows longer than 65536
(a whole row lives in registers); an all-zero row (its scale is 0 and q undefined, as in
the reference).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import as_rows, autotune_configs, row_block

_CONFIGS = autotune_configs(
    [triton.Config({}, num_warps=w) for w in (2, 4, 8, 16)],
    triton.Config({}, num_warps=4),
)


@triton.autotune(configs=_CONFIGS, key=["N"])
@triton.jit
def _int8_token_kernel(x_ptr, q_ptr, s_ptr, N, stride_x, stride_q, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=0)
    # PyTorch evaluates the reference's `127.0 / amax` as `127.0 * (1 / amax)`
    v = x * (127.0 * tl.math.div_rn(1.0, amax))
    # |v| <= 127 already, so clamping before rounding changes nothing, but it keeps the
    # compiler from contracting the product and the add below into an FMA, which would
    # round the exact product rather than the reference's fp32 one
    v = tl.minimum(tl.maximum(v, -128.0), 127.0)
    # adding and removing 1.5 * 2^23 leaves fp32's round-half-to-even integer (Triton has
    # no portable rint)
    q = ((v + 12582912.0) - 12582912.0).to(tl.int8)
    tl.store(q_ptr + row * stride_q + cols, q, mask=mask)
    tl.store(s_ptr + row, tl.math.div_rn(amax, 127.0))


def int8_quant_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scales)``: ``x`` as int8 with one fp32 scale per row, scales [*leading, 1]."""
    n = x.shape[-1]
    rows = as_rows(x)
    q = torch.empty(rows.shape, dtype=torch.int8, device=x.device)
    s = torch.empty((rows.shape[0], 1), dtype=torch.float32, device=x.device)
    if rows.numel():
        _int8_token_kernel[(rows.shape[0],)](rows, q, s, n, rows.stride(0), q.stride(0),
                                             BLOCK_N=row_block(n))
    return q.view(x.shape), s.view(*x.shape[:-1], 1)
