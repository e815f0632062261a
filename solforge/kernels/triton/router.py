"""Mixture-of-experts routing: softmax over the experts, top-k, optional renormalisation of
the k weights, in one launch (Mixtral's and Qwen-MoE's ``softmax(logits, dtype=float) ->
topk -> w / w.sum()``; three to five kernels in eager PyTorch or torch.compile, where
``topk`` stays a separate ATen call).

Each program takes a block of tokens with all their experts in registers: fp32 softmax,
then k rounds of "largest probability, lowest index among equals", as ``torch.topk``
(sorted, largest) returns them in descending order.

Not covered: more than 4096 experts (a row is held in registers); ``sorted=False`` or
``largest=False``; grouped routing (DeepSeek-V3's group-limited top-k with a score correction
bias) and sigmoid scoring; probabilities that tie exactly, where ``torch.topk``'s order between
equal values is not specified (this kernel takes the lower index first). The probabilities are
PyTorch's fp32 values with subnormals kept (a logit 87 or more below its row's largest; the
GPU's fp32 exp flushes those to zero, which changed 12 of 65,536 expert ids of DBRX's 16k-token
workload with outlier inputs, benchmarks/results/2026-12-02-h200-s10), computed in fp64 and
rounded once each; PyTorch's own ``expf`` may differ by an ulp, so two probabilities within an
ulp of each other may still come out in the other order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, as_rows, cast_rne

_MAX_EXPERTS = 4096


@triton.jit
def _as_fp32(v):
    """Non-negative fp64 ``v`` rounded (to nearest even) to the fp32 value it would have,
    subnormals included, still in fp64: below fp32's smallest normal, to a multiple of
    2^-149 (adding and taking away 2^52 rounds an fp64 to an integer)."""
    sub = ((v * 2.0 ** 149 + 2.0 ** 52) - 2.0 ** 52) * 2.0 ** -149
    return tl.where(v < 2.0 ** -126, sub, v.to(tl.float32).to(tl.float64))


@triton.jit
def _softmax_topk_kernel(x_ptr, w_ptr, id_ptr, R, E, stride_x, K: tl.constexpr,
                         RENORM: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_E: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < R
    ok = row_ok[:, None] & (cols[None, :] < E)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask=ok,
                other=float("-inf")).to(tl.float32)
    # fp32 values as PyTorch's softmax rounds them, subnormals kept, carried in fp64: a
    # GPU's fp32 exp flushes them to zero, and zeros tie where PyTorch's values do not
    e = _as_fp32(tl.exp((x - tl.max(x, axis=1)[:, None]).to(tl.float64)))
    e = tl.where(ok, e, 0.0)
    p = _as_fp32(e / _as_fp32(tl.sum(e, axis=1))[:, None])
    p = tl.where(ok, p, -1.0)  # padding never selected (probabilities are >= 0)
    total = tl.zeros((BLOCK_R,), tl.float64)
    if RENORM:
        q = p
        for j in tl.static_range(K):
            top = tl.max(q, axis=1)
            at = tl.min(tl.where(q == top[:, None], cols[None, :], BLOCK_E), axis=1)
            total += top
            q = tl.where(cols[None, :] == at[:, None], -1.0, q)
    out = rows.to(tl.int64) * K
    for j in tl.static_range(K):
        top = tl.max(p, axis=1)
        at = tl.min(tl.where(p == top[:, None], cols[None, :], BLOCK_E), axis=1)
        w = (top / total if RENORM else top).to(tl.float32)
        tl.store(w_ptr + out + j, cast_rne(w, w_ptr.dtype.element_ty), mask=row_ok)
        tl.store(id_ptr + out + j, at.to(tl.int64), mask=row_ok)
        p = tl.where(cols[None, :] == at[:, None], -1.0, p)


def softmax_topk(logits: torch.Tensor, k: int, renormalize: bool = False,
                 out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``w, ids = torch.topk(logits.softmax(-1, dtype=torch.float32), k, dim=-1)``, then
    ``w / w.sum(-1, keepdim=True)`` with ``renormalize``, written as ``out_dtype`` (default
    fp32): (weights [..., k], int64 ids [..., k])."""
    experts = logits.shape[-1]
    k = int(k)
    if not 1 <= k <= experts or experts > _MAX_EXPERTS:
        raise ValueError(f"softmax_topk: k={k} of {experts} experts; needs 1 <= k <= experts "
                         f"<= {_MAX_EXPERTS}")
    rows = as_rows(logits)
    r = rows.shape[0]
    shape = (*logits.shape[:-1], k)
    w = torch.empty(shape, dtype=out_dtype or torch.float32, device=logits.device)
    ids = torch.empty(shape, dtype=torch.int64, device=logits.device)
    if r:
        block_e = triton.next_power_of_2(experts)
        block_r = 4 if INTERPRET else max(1, min(64, 2048 // block_e))
        _softmax_topk_kernel[(triton.cdiv(r, block_r),)](
            rows, w, ids, r, experts, rows.stride(0), K=k, RENORM=renormalize,
            BLOCK_R=block_r, BLOCK_E=block_e, num_warps=4)
    return w, ids
