"""LayerNorm over the last dim, weight and bias optional, fp32 statistics.

Matches ``nn.LayerNorm`` / ``F.layer_norm``: biased variance, ``(x - mean) * rstd * w + b``
in fp32, rounded once to ``x``'s dtype.

Not covered: normalising over more than the last dim; rows longer than 65536 (a whole row
lives in registers); returning mean/rstd for a backward.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    as_rows,
    autotune_configs,
    cast_rne,
    row_block,
)

_CONFIGS = autotune_configs(
    [triton.Config({}, num_warps=w) for w in (2, 4, 8, 16)],
    triton.Config({}, num_warps=4),
)


@triton.autotune(configs=_CONFIGS, key=["N"])
@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, stride_x, stride_y,
                      HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    # two passes over registers rather than E[x^2] - E[x]^2, which cancels badly for
    # rows far from zero mean (ViT residual streams)
    xc = tl.where(mask, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / N + eps)
    y = xc * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm of ``x`` (any leading shape) over its last dim; output in ``x``'s dtype."""
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (n,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected ({n},)")
    rows = as_rows(x)
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if rows.shape[0]:
        _layernorm_kernel[(rows.shape[0],)](
            rows, weight if weight is not None else rows, bias if bias is not None else rows,
            y, n, eps, rows.stride(0), y.stride(0),
            HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, BLOCK_N=row_block(n))
    return y.view(x.shape)
