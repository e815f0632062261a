"""Bias add + activation, the epilogue a GEMM without a fused bias leaves behind.

``y = act(x + bias)`` over the last dim: GELU (``"gelu"``, exact erf), tanh GELU
(``"gelu_tanh"``), SiLU (``"silu"``) or none (``None``, bias only); the bias is optional,
so this is also the plain activation. As eager PyTorch does, ``x + bias`` is rounded to
``x``'s dtype before the activation, which runs in fp32 and is rounded once.

Not covered: a bias over any dim but the last; activations other than those four; an
output dtype other than ``x``'s.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    activation_code,
    apply_activation,
    as_rows,
    cast_rne,
    elementwise_configs,
)

_CONFIGS = elementwise_configs()


@triton.autotune(configs=_CONFIGS, key=["N"])
@triton.jit
def _bias_act_kernel(x_ptr, b_ptr, y_ptr, N, stride_x, stride_y,
                     HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        x = cast_rne(x.to(tl.float32) + b.to(tl.float32), x.dtype)
    y = apply_activation(x.to(tl.float32), ACT)
    tl.store(y_ptr + row * stride_y + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def bias_act(x: torch.Tensor, bias: torch.Tensor | None = None,
             activation: str | None = "gelu") -> torch.Tensor:
    """``activation(x + bias)`` over the last dim of ``x`` (any leading shape)."""
    n = x.shape[-1]
    if bias is not None and bias.shape != (n,):
        raise ValueError(f"bias has shape {tuple(bias.shape)}; expected ({n},)")
    act = activation_code(activation)
    rows = as_rows(x)
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if rows.numel():
        grid = lambda meta: (rows.shape[0], triton.cdiv(n, meta["BLOCK_N"]))
        _bias_act_kernel[grid](rows, bias if bias is not None else rows, y, n,
                               rows.stride(0), y.stride(0),
                               HAS_BIAS=bias is not None, ACT=act)
    return y.view(x.shape)
