"""RMSNorm, with the Gemma ``(1 + w)`` weight and an optional fused residual add.

Two weight conventions, both HF's eager code:

- Llama/Qwen/Mistral (``LlamaRMSNorm``): ``h = x.float() * rsqrt(mean(x^2) + eps)`` is
  rounded to ``x``'s dtype *before* the weight multiplies it, and the product has the
  promoted dtype of weight and input.
- Gemma (``GemmaRMSNorm``, ``offset_weight=True``): the weight is stored as an offset,
  ``y = h * (1 + w.float())`` stays in fp32 and is rounded to ``x``'s dtype once.

Not covered: rows longer than 65536 (a whole row lives in registers); a weight that is not
one vector of the last dim's size; backward.
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
def _rmsnorm_kernel(x_ptr, res_ptr, res_out_ptr, w_ptr, y_ptr, N, eps,
                    stride_x, stride_res, stride_res_out, stride_y,
                    HAS_RESIDUAL: tl.constexpr, OFFSET_WEIGHT: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
        # the new residual stream is rounded to its dtype before it is normalised, as an
        # unfused `residual + x` would be
        x = cast_rne(x.to(tl.float32) + r.to(tl.float32), x.dtype)
        tl.store(res_out_ptr + row * stride_res_out + cols, x, mask=mask)
    h = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(h * h, axis=0) / N + eps)
    h = h * rstd
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if OFFSET_WEIGHT:
        y = h * (1.0 + w)
    else:
        y = cast_rne(h, x.dtype).to(tl.float32) * w
    tl.store(y_ptr + row * stride_y + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
            offset_weight: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight has shape {tuple(weight.shape)}; expected ({n},)")
    out_dtype = x.dtype if offset_weight else torch.promote_types(weight.dtype, x.dtype)
    rows = as_rows(x)
    y = torch.empty(rows.shape, dtype=out_dtype, device=x.device)
    res = res_out = None
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError("residual must have x's shape and dtype")
        res = as_rows(residual)
        res_out = torch.empty_like(res, memory_format=torch.contiguous_format)
    if rows.shape[0]:
        _rmsnorm_kernel[(rows.shape[0],)](
            rows, res if res is not None else rows, res_out if res_out is not None else y,
            weight, y, n, eps,
            rows.stride(0), res.stride(0) if res is not None else 0,
            res_out.stride(0) if res_out is not None else 0, y.stride(0),
            HAS_RESIDUAL=residual is not None, OFFSET_WEIGHT=offset_weight,
            BLOCK_N=row_block(n))
    return y.view(x.shape), res_out.view(x.shape) if res_out is not None else None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
             offset_weight: bool = False) -> torch.Tensor:
    """RMSNorm over the last dim of ``x`` (any leading shape), fp32 math.

    ``offset_weight=False`` is Llama's ``weight * h.to(x.dtype)`` (output in the promoted
    dtype of weight and x); ``True`` is Gemma's ``(h * (1 + weight)).to(x.dtype)``.
    """
    return _launch(x, None, weight, eps, offset_weight)[0]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float = 1e-6, *, offset_weight: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = residual + x`` (rounded to their dtype), then :func:`rms_norm` of it.

    Returns ``(normed, residual)`` as vLLM's ``fused_add_rms_norm`` computes them, but into
    new tensors: the inputs are left untouched.
    """
    y, res = _launch(x, residual, weight, eps, offset_weight)
    return y, res
