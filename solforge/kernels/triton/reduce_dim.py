"""Sum (or mean) over one dim that is not the last: ``x.sum(dim)`` of an ``[A, K, B]`` view,
as MoE layers combine their top-k expert outputs (``[tokens, top_k, hidden].sum(1)``, vLLM's
``moe_sum``) and vision encoders pool their tokens (``[batch, tokens, hidden].mean(1)``).

Each program takes one ``a`` and a tile of ``B`` columns and walks the ``K`` rows, adding
in fp32, so every read is a contiguous tile. A generic reduction kernel picks one layout for
every shape and misses on some: eager PyTorch at 3x the bytes' time for ``[8192, 2, 4096]``
bf16, torch.compile at 4.5x for ``[4096, 8, 7168]`` (benchmarks/results/2026-12-02-h200-s10).

Not covered: splitting ``K`` over programs, so few ``a`` x column tiles run on few SMs, each
walking all of ``K`` (ViT-L's batch-1 token mean: 0.025 ms against torch.compile's split
reduction's 0.003 ms; benchmarks/results/2026-12-02-h200-s10); the last dim (the row kernels do
that), several dims at once, ``keepdim``, a ``dtype`` argument, integer inputs; sums in fp32 in
order over ``K``, where PyTorch's order differs: the results may differ in the last bits of
fp32 (and round the same way to fp16/bf16 but for rare ties).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    around_dim,
    autotune_configs,
    cast_rne,
    reads_as_akb,
)


@triton.autotune(
    configs=autotune_configs(
        [triton.Config({"BLOCK_B": 256}, num_warps=2),
         triton.Config({"BLOCK_B": 512}, num_warps=4),
         triton.Config({"BLOCK_B": 1024}, num_warps=4),
         triton.Config({"BLOCK_B": 2048}, num_warps=8)],
        triton.Config({"BLOCK_B": 64}, num_warps=4)),
    key=["K", "B"])
@triton.jit
def _sum_dim_kernel(x_ptr, y_ptr, K, B, stride_a, stride_k, inv_k, MEAN: tl.constexpr,
                    BLOCK_B: tl.constexpr):
    a = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    ok = cols < B
    ptrs = x_ptr + a * stride_a + cols
    acc = tl.zeros((BLOCK_B,), tl.float32)
    for _ in range(0, K):
        acc += tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
        ptrs += stride_k  # 64-bit pointer arithmetic: no index overflow
    if MEAN:
        acc = acc * inv_k
    tl.store(y_ptr + a * B + cols, cast_rne(acc, y_ptr.dtype.element_ty), mask=ok)


def sum_dim(x: torch.Tensor, dim: int, mean: bool = False, keepdim: bool = False
            ) -> torch.Tensor:
    """``x.sum(dim, keepdim)`` (``x.mean(dim, keepdim)`` with ``mean``) for a
    floating-point ``x`` and a ``dim`` other than the last, accumulated in fp32: ``x``'s
    dtype, ``dim`` removed (kept with size 1 with ``keepdim``: a view of the result)."""
    y = _sum_dim(x, dim, mean)
    return y.unsqueeze(dim % x.dim()) if keepdim else y


def _sum_dim(x: torch.Tensor, dim: int, mean: bool) -> torch.Tensor:
    if not x.is_floating_point():
        raise ValueError(f"sum_dim: floating-point input only, got {x.dtype}")
    d = dim % x.dim() if x.dim() else 0
    if x.dim() < 2 or d == x.dim() - 1:
        raise ValueError(f"sum_dim reduces a dim other than the last; got dim={dim} of shape "
                         f"{tuple(x.shape)}")
    a, k, b = around_dim(x.shape, d)
    shape = (*x.shape[:d], *x.shape[d + 1:])
    y = torch.empty(shape, dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    if k == 0:  # PyTorch: a sum over nothing is 0, a mean NaN
        return y.fill_(float("nan") if mean else 0.0)
    if not reads_as_akb(x, d):
        x = x.contiguous()
    stride_a = x.stride(d - 1) if d else 0
    grid = lambda meta: (a, triton.cdiv(b, meta["BLOCK_B"]))  # noqa: E731
    _sum_dim_kernel[grid](x, y, k, b, stride_a, x.stride(d), 1.0 / k, MEAN=mean)
    return y
