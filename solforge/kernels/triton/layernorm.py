"""LayerNorm over the trailing dims, weight and bias optional, fp32 statistics.

Matches ``nn.LayerNorm`` / ``F.layer_norm``: biased variance, ``(x - mean) * rstd * w + b``
in fp32, rounded once to ``x``'s dtype. A row is the ``normalized_shape`` trailing dims
(the last dim by default), flattened.

Rows that fill the GPU and fit one program's registers (up to 65536 elements) take one
program each, one pass over registers. Longer rows take the one-read cooperative path
(``row_norm``, ``cooperative``) when their pieces fill the GPU (``row_norm.plan`` with
one-pass rows kept here: KernelBench's 16 rows of 4M elements are 256 pieces of 16384 a
row, one row in flight on 132 SMs); the rest, and rows too few to fill the GPU
(``_common.row_splits``), are split over several programs in two launches
(``layernorm_split``), reading the input twice.

Not covered: returning mean/rstd for a backward; a weight or bias in a dtype other than
``x``'s (the search pattern refuses them; here they are read and promoted to fp32).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from solforge.kernels.triton import layernorm_split, row_norm
from solforge.kernels.triton._common import (
    INTERPRET,
    autotune_configs,
    cast_rne,
    row_block,
    row_splits,
    sm_count,
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


# the one-pass kernel keeps a row in registers up to this length
ONE_PASS_MAX = 65536
# rows up to this length never take the cooperative path: on a GPU those the one-pass
# kernel holds; under the interpreter a short length, so CPU tests reach the cooperative
# cut with small shapes while the shapes up to 512 keep exercising today's paths
COOP_MIN = 512 if INTERPRET else ONE_PASS_MAX
# whether long rows take the cooperative path by default on a GPU: no. KernelBench's
# 40_LayerNorm (16 rows of 4,194,304) took 0.410 ms there against 0.289 ms in the
# two-launch path on an H100 (0.417 ms without the L2 hints; benchmarks/results/
# 2026-12-06-h100-s22/probes/norm_probe.json), and its kept solution fell from 1.53x
# (session 20, two-launch) to 1.09x. No LayerNorm shape measured so far favours it;
# ``cooperative=True`` still takes it (the probe's comparison)
COOP_DEFAULT_GPU = False


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5,
               normalized_shape: Sequence[int] | None = None, *,
               cooperative: bool | None = None) -> torch.Tensor:
    """``F.layer_norm(x, normalized_shape, weight, bias, eps)``, over the last dim when
    ``normalized_shape`` is None; output in ``x``'s dtype. ``cooperative``: whether rows
    longer than ``COOP_MIN`` take the one-read cooperative path (True) or the two-launch
    one (False); None, the default, takes it on a CPU and under the interpreter and, on a
    GPU, as ``COOP_DEFAULT_GPU`` says (measured slower there: off)."""
    ns = (x.shape[-1],) if normalized_shape is None else tuple(int(d) for d in normalized_shape)
    if not ns or x.dim() < len(ns) or tuple(x.shape[x.dim() - len(ns):]) != ns:
        raise ValueError(f"layer_norm over {ns} of an input of shape {tuple(x.shape)}: the "
                         "normalized shape must be the input's trailing dims")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != ns:
            raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {ns}")
    n = math.prod(ns)
    rows = x.reshape(-1, n)
    if rows.stride(-1) != 1 and n > 1:
        rows = rows.contiguous()
    r = rows.shape[0]
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    if r == 0 or n == 0:
        return y.view(x.shape)
    w = weight.contiguous().view(n) if weight is not None else None
    b = bias.contiguous().view(n) if bias is not None else None
    plan = row_norm.plan(r, n, sm_count(str(x.device)), INTERPRET or x.device.type != "cuda",
                         max_tile=COOP_MIN)
    if cooperative is None:
        cooperative = COOP_DEFAULT_GPU or INTERPRET or x.device.type != "cuda"
    if cooperative and plan.kind in ("coop", "pieces"):
        row_norm.norm_rows(rows, y, row_norm.MEAN_VAR, eps, w, b, row_norm.PER_COLUMN,
                           row_plan=plan)
        return y.view(x.shape)
    pieces, chunk = row_splits(r, n, x.device, layernorm_split.TILE)
    if pieces > 1 or n > ONE_PASS_MAX:
        if pieces == 1:  # long rows, enough of them: one piece a row, whole tiles
            chunk = -(-n // layernorm_split.TILE) * layernorm_split.TILE
        layernorm_split.layer_norm_pieces(rows, w, b, eps, y, pieces, chunk)
        return y.view(x.shape)
    _layernorm_kernel[(r,)](
        rows, w if w is not None else rows, b if b is not None else rows,
        y, n, eps, rows.stride(0), y.stride(0),
        HAS_WEIGHT=w is not None, HAS_BIAS=b is not None, BLOCK_N=row_block(n, ONE_PASS_MAX))
    return y.view(x.shape)
