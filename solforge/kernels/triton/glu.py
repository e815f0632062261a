"""Gated linear units: SwiGLU ``silu(gate) * up`` and GeGLU ``gelu_tanh(gate) * up``.

``gate`` and ``up`` come as two tensors (HF's separate ``gate_proj`` / ``up_proj``) or as
one tensor whose last dim holds gate then up (vLLM's merged ``gate_up_proj`` and its
``silu_and_mul``). As HF's eager MLP does, the activation is rounded to the inputs' dtype
before the product, which is rounded again.

Not covered: an interleaved gate/up layout; clamped SwiGLU variants (GPT-OSS); gates other
than SiLU and tanh GELU.
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
def _glu_kernel(gate_ptr, up_ptr, y_ptr, N, stride_gate, stride_up, stride_y,
                ACT: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    g = tl.load(gate_ptr + row * stride_gate + cols, mask=mask, other=0.0)
    u = tl.load(up_ptr + row * stride_up + cols, mask=mask, other=0.0)
    a = cast_rne(apply_activation(g.to(tl.float32), ACT), g.dtype).to(tl.float32)
    y = a * u.to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def _glu(gate: torch.Tensor, up: torch.Tensor | None, activation: str) -> torch.Tensor:
    if up is None:
        if gate.shape[-1] % 2:
            raise ValueError(f"a merged gate/up tensor needs an even last dim, got "
                             f"{gate.shape[-1]}")
        merged = as_rows(gate)
        n = merged.shape[1] // 2
        g_rows, u_rows = merged[:, :n], merged[:, n:]
        out_shape = (*gate.shape[:-1], n)
    else:
        if up.shape != gate.shape or up.dtype != gate.dtype:
            raise ValueError("gate and up must have the same shape and dtype")
        g_rows, u_rows = as_rows(gate), as_rows(up)
        n = g_rows.shape[1]
        out_shape = gate.shape
    y = torch.empty((g_rows.shape[0], n), dtype=gate.dtype, device=gate.device)
    if y.numel():
        grid = lambda meta: (y.shape[0], triton.cdiv(n, meta["BLOCK_N"]))
        _glu_kernel[grid](g_rows, u_rows, y, n, g_rows.stride(0), u_rows.stride(0),
                          y.stride(0), ACT=activation_code(activation))
    return y.view(out_shape)


def swiglu(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """``silu(gate) * up``; with ``up=None``, ``gate`` holds ``[gate | up]`` on its last dim."""
    return _glu(gate, up, "silu")


def geglu(gate: torch.Tensor, up: torch.Tensor | None = None) -> torch.Tensor:
    """``gelu_tanh(gate) * up`` (Gemma's MLP); ``up=None`` as in :func:`swiglu`."""
    return _glu(gate, up, "gelu_tanh")
