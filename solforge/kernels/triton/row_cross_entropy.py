"""Cross-entropy of logits ``[N, C]`` against class indices ``[N]``, as
``F.cross_entropy(logits, target, ignore_index=..., reduction=...)``: per row
``logsumexp(logits) - logits[target]`` in fp32, ignored rows (``target == ignore_index``)
contributing nothing; ``'mean'`` divides by the count of rows not ignored (0 / 0 is NaN,
as torch's), ``'sum'`` adds them, ``'none'`` returns each row's loss (0 where ignored).

The first launch reads each row once: rows up to 8192 classes lie whole in registers
(several short rows to a program), longer ones stream in tiles with an online max and sum;
the target's logit is picked from the registers, or loaded on its own for long rows. The
mean or sum is a second launch of one program that adds the per-row losses in a fixed
order (no atomics): the same inputs give the same bits every run.

Logits in fp16 or bf16 are read as they are and computed in fp32; torch rounds the
log-probabilities to the logits' dtype before it picks and sums them, so 16-bit results
differ from torch's within that dtype's step. ``out_dtype`` (default the logits') is the
loss's dtype: ``cross_entropy(x, t, out_dtype=torch.float32)`` is
``F.cross_entropy(x.float(), t)`` without the fp32 copy of ``x``.

Not covered: class weights, label smoothing, probabilities as targets, logits of other
than 2 dims (``[N, C, d1, ...]`` or ``[C]``); targets outside ``[0, C)`` that are not
``ignore_index`` give NaN where torch raises; few rows over a huge vocabulary are one
program a row (no split over programs); the mean or sum is one program's loop, so past a
million rows it takes tens of microseconds of its own.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, autotune_configs, cast_rne

# the widest class tile; rows up to it are read whole (the interpreter's is small, so CPU
# runs stream long rows too)
_MAX_TILE = 128 if INTERPRET else 8192
# a program takes rows up to this many logits at once (short rows: several to a program)
_ROWS_TILE = 256 if INTERPRET else 8192
_REDUCE_BLOCK = 64 if INTERPRET else 4096
_REDUCTIONS = ("mean", "sum", "none")


def _configs() -> list[triton.Config]:
    gpu = [triton.Config({"BLOCK_R": r}, num_warps=w)
           for r in (1, 2, 4, 8, 16, 32, 64) for w in (4, 8, 16)]
    return autotune_configs(gpu, triton.Config({"BLOCK_R": 2}, num_warps=4))


def _fitting(configs: list[triton.Config], named_args: dict, **kwargs) -> list[triton.Config]:
    """Configs whose tile of rows x classes is at most ``_ROWS_TILE`` logits (or one row),
    and at least a quarter of it where the rows allow; 16 warps only for tiles of 4096
    logits or more."""
    bc = kwargs["BLOCK_C"]
    kept = []
    for c in configs:
        tile = c.kwargs["BLOCK_R"] * bc
        if (tile <= _ROWS_TILE or c.kwargs["BLOCK_R"] == 1) and \
                (tile * 4 >= _ROWS_TILE or c.kwargs["BLOCK_R"] == 64) and \
                (c.num_warps < 16 or tile >= 4096):
            kept.append(c)
    return kept or configs


@triton.autotune(configs=_configs(), key=["C", "BLOCK_C", "ONE_TILE"],
                 prune_configs_by={"early_config_prune": _fitting})
@triton.jit
def _ce_rows_kernel(x_ptr, t_ptr, loss_ptr, R, C, stride_x, ignore_index,
                    BLOCK_C: tl.constexpr, ONE_TILE: tl.constexpr, BLOCK_R: tl.constexpr):
    """Program: ``BLOCK_R`` rows' losses (0 for an ignored row)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    t = tl.load(t_ptr + rows, mask=row_ok, other=ignore_index).to(tl.int64)
    valid = row_ok & (t != ignore_index)
    in_range = (t >= 0) & (t < C)
    x_rows = x_ptr + rows[:, None] * stride_x
    cols = tl.arange(0, BLOCK_C)
    if ONE_TILE:
        ok = row_ok[:, None] & (cols < C)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=ok, other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=1)
        safe = tl.where(m == float("-inf"), 0.0, m)
        total = tl.sum(tl.exp(x - safe[:, None]), axis=1)
        picked = tl.sum(tl.where(cols[None, :] == t[:, None], x, 0.0), axis=1)
    else:
        m = tl.full((BLOCK_R,), float("-inf"), tl.float32)
        total = tl.zeros((BLOCK_R,), tl.float32)
        for start in range(0, C, BLOCK_C):
            ok = row_ok[:, None] & (start + cols < C)[None, :]
            x = tl.load(x_rows + start + cols[None, :], mask=ok, other=float("-inf"))
            x = x.to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            total = total * tl.exp(m - safe) + tl.sum(tl.exp(x - safe[:, None]), axis=1)
            m = m_new
        safe = tl.where(m == float("-inf"), 0.0, m)
        picked = tl.load(x_ptr + rows * stride_x + t, mask=valid & in_range,
                         other=0.0).to(tl.float32)
    # a row of -inf only: -inf - -inf, NaN, as torch's log_softmax gives
    loss = safe + tl.log(total) - picked
    loss = tl.where(valid, tl.where(in_range, loss, float("nan")), 0.0)
    tl.store(loss_ptr + rows, cast_rne(loss, loss_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _ce_reduce_kernel(loss_ptr, t_ptr, out_ptr, R, ignore_index, MEAN: tl.constexpr,
                      BLOCK: tl.constexpr):
    """One program: the sum of the losses (over the count of rows not ignored, with
    ``MEAN``), lane by lane in row order, then across lanes: a fixed order."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    count = tl.zeros((BLOCK,), tl.int64)
    for start in range(0, R, BLOCK):
        i = start + offs
        ok = i < R
        acc += tl.load(loss_ptr + i, mask=ok, other=0.0)
        t = tl.load(t_ptr + i, mask=ok, other=ignore_index)
        count += (ok & (t != ignore_index)).to(tl.int64)
    total = tl.sum(acc, axis=0)
    if MEAN:
        total = total / tl.sum(count, axis=0).to(tl.float32)
    tl.store(out_ptr, cast_rne(total, out_ptr.dtype.element_ty))


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  reduction: str = "mean", out_dtype: torch.dtype | None = None
                  ) -> torch.Tensor:
    """``F.cross_entropy(logits.to(out_dtype), target, ignore_index=ignore_index,
    reduction=reduction)`` for floating-point ``[N, C]`` logits and integer ``[N]``
    class indices, computed in fp32 (see the module docstring)."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction {reduction!r}; use one of {_REDUCTIONS}")
    if logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"cross_entropy: floating-point [N, C] logits only, got "
                         f"{logits.dtype} of shape {tuple(logits.shape)}")
    if target.shape != logits.shape[:1] or target.is_floating_point() or \
            target.dtype == torch.bool:
        raise ValueError(f"cross_entropy: integer class indices of shape "
                         f"{tuple(logits.shape[:1])} only, got {target.dtype} of shape "
                         f"{tuple(target.shape)}")
    out_dtype = out_dtype or logits.dtype
    r, c = logits.shape
    if c == 0:
        raise ValueError("cross_entropy: logits with no classes")
    if logits.stride(1) != 1 and c > 1:
        logits = logits.contiguous()
    target = target.contiguous()
    per_row = torch.empty(r, dtype=out_dtype if reduction == "none" else torch.float32,
                          device=logits.device)
    if r:
        block_c = min(triton.next_power_of_2(c), _MAX_TILE)
        grid = lambda meta: (triton.cdiv(r, meta["BLOCK_R"]),)  # noqa: E731
        _ce_rows_kernel[grid](logits, target, per_row, r, c, logits.stride(0), ignore_index,
                              BLOCK_C=block_c, ONE_TILE=c <= block_c)
    if reduction == "none":
        return per_row
    out = torch.empty((), dtype=out_dtype, device=logits.device)
    _ce_reduce_kernel[(1,)](per_row, target, out, r, ignore_index, MEAN=reduction == "mean",
                            BLOCK=_REDUCE_BLOCK, num_warps=4 if INTERPRET else 8)
    return out
