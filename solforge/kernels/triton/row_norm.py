"""Normalisations by per-row statistics, one kernel for every row length: LayerNorm's long
rows, GroupNorm, InstanceNorm, and a row divided by its mean absolute value or its L2
norm. fp32 statistics, any float dtype in, the input's dtype out.

A row is a contiguous run of ``n`` elements: LayerNorm's trailing dims, one group of one
sample (GroupNorm: its channels x spatial), one (sample, channel) plane (InstanceNorm), the
last dim. Its statistic (``STAT``):

- ``MEAN_VAR``: the mean and the biased variance: each piece's count, mean and sum of
  squared deviations (M2), exact within the piece (two passes over registers), the pieces
  merged by Chan's parallel formula (``mean = sum(c_i mean_i) / n``, ``M2 = sum(M2_i +
  c_i (mean_i - mean)^2)``); ``y = (x - mean) * rsqrt(M2 / n + eps)``, then the weight and
  bias;
- ``MEAN_ABS``: ``y = x / mean(|x|)`` (KernelBench's 38_L1Norm_);
- ``L2``: ``y = x / sqrt(sum(x^2))`` (``x / torch.norm(x, p=2, dim=-1, keepdim=True)``,
  KernelBench's 39_L2Norm_), the norm clamped to ``eps`` first (``F.normalize``; ``eps``
  0 for the plain division).

For the last two the divisor is rounded to the output dtype first, as PyTorch rounds the
reduction's result before the division (exact in fp32, the eager rounding in 16-bit), and
a row of zeros gives NaN as PyTorch's does.

Weight and bias (``AFFINE``): none; one per column of the row (LayerNorm); or one per
channel, the channel of row ``r``'s column ``c`` being ``(r % groups) * per_group + c //
spatial`` (GroupNorm; InstanceNorm is GroupNorm with a group per channel). When every piece
lies in one channel (the spatial size a multiple of the piece, or a row of one channel)
the channel is one number per piece; else it is divided out per element.

Paths (``plan``, ``cooperative.plan_rows`` with this kernel's figures):

- ``tile``: a row of up to ``_COOP_CHUNK`` elements is one program's piece, one pass;
- ``coop``: the one-read cooperative path (``cooperative``) in pieces of ``_COOP_CHUNK``;
  KernelBench's shapes on an H100 (132 SMs): LayerNorm (64, 256, 256) of 16 samples is 256
  pieces a row, one row in flight; GroupNorm(8, 64) of [112, 64, 512, 512] 128 pieces, 2
  rows; InstanceNorm2d(64) 16 pieces, 16 rows; rows of 65535 4 pieces, 66 rows;
- ``pieces``: the same cut in two launches (partials, then the combination and the write,
  reading the input again): under the interpreter, and on a GPU where a row's pieces
  cannot all be resident;
- ``rows``: too few rows to fill the GPU, or rows of more pieces than it holds: the same
  two launches over every row (``layernorm.layer_norm`` keeps its own paths for those).

Not covered: a row of 2**31 elements or more; returning the mean and rstd for a backward;
RMS normalisation (``rmsnorm`` keeps rows up to 65536 in registers; longer rows and a norm
over a middle dim, KernelBench's 36_RMSNorm_ over channels, are not here); running
statistics (the callers pass instance or group statistics only); weights in a dtype other
than the input's (read and promoted to fp32 here, but the search patterns refuse them).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, cast_rne, sm_count
from solforge.kernels.triton.cooperative import (
    FALLBACK_TILE,
    MAX_SPINS,
    PER_SM,
    RowPlan,
    arrive_and_wait,
    counters,
    launch,
    plan_rows,
)

MEAN_VAR, MEAN_ABS, L2 = 0, 1, 2
NO_AFFINE, PER_COLUMN, PER_CHANNEL = 0, 1, 2

# A piece is one program's tile in registers: on a GPU 16384 fp32 over 8 warps (64 a
# thread: two programs a SM), as the softmax's (``row_softmax``: pieces of 8192 were 1.5x
# slower there, a wait covering fewer bytes). The interpreter's piece is small so CPU
# shapes cut into several.
_COOP_CHUNK = 256 if INTERPRET else 16384
_COOP_WARPS = 4 if INTERPRET else 8
# The cooperative kernel's registers a thread, so that two programs of 8 warps fit a SM's
# 65536. Compiled for sm_90 without the cap, ptxas takes 212-255 (one program a SM, half
# the slots); with it, no spill except 16 bytes a thread for a per-column weight and bias
# (LayerNorm) and 144 for a per-element channel (GroupNorm whose spatial size is not a
# multiple of the piece).
_COOP_MAXNREG = 128
# L2 eviction hints of the cooperative kernel: whole pieces streamed (evict first), a
# weight and bias per column kept (evict last). KernelBench's LayerNorm walks one row at a
# time, and each program reads the same 128 KiB of weight and bias for every row: 32 MB
# of them, beside 32 MB of input and output a row, in an H100's 50 MB of L2; an L2 that
# evicts the least recently used would read them from DRAM again each row, as many bytes
# again as the input. Compiled for sm_90 and tested under the interpreter, not yet timed
# on a GPU (benchmarks/gpu/norm_probe.py --no-hints).
_COOP_L2_HINTS = True
# the most programs on grid dim 1 (CUDA's limit); a program walks rows lane, lane + G, ...
_MAX_LANES = 65535


@triton.jit
def _piece_stats(x, n_p, mask, STAT: tl.constexpr):
    """The statistic of registers ``x`` (``n_p`` valid entries: where ``mask``, or all when
    ``mask`` is None; 0 elsewhere): (mean, M2) for ``MEAN_VAR``, (sum of |x|, 0) or (sum of
    x^2, 0) for the others."""
    if STAT == 0:
        mean = tl.sum(x, axis=0) / n_p
        d = x - mean
        if mask is not None:
            d = tl.where(mask, d, 0.0)
        return mean, tl.sum(d * d, axis=0)
    elif STAT == 1:
        return tl.sum(tl.abs(x), axis=0), tl.full((), 0.0, tl.float32)
    else:
        return tl.sum(x * x, axis=0), tl.full((), 0.0, tl.float32)


@triton.jit
def _stats_by_tiles(x_row, start, end, TILE: tl.constexpr, STAT: tl.constexpr):
    """The statistic of ``x_row[start:end]`` read in tiles: each tile's own, merged into the
    running one (Chan's update for ``MEAN_VAR``)."""
    t = tl.arange(0, TILE)
    count = tl.full((), 0.0, tl.float32)
    a = tl.full((), 0.0, tl.float32)
    b = tl.full((), 0.0, tl.float32)
    for at in range(start, end, TILE):
        mask = at + t < end
        xs = tl.load(x_row + at + t, mask=mask, other=0.0).to(tl.float32)
        n_t = tl.minimum(end - at, TILE).to(tl.float32)
        a_t, b_t = _piece_stats(xs, n_t, mask, STAT)
        if STAT == 0:
            total = count + n_t
            delta = a_t - a
            frac = n_t / total
            a += delta * frac
            b += b_t + delta * delta * count * frac
            count = total
        else:
            a += a_t
    return a, b


@triton.jit
def _combine(s1_ptr, s2_ptr, base, P, N, CHUNK: tl.constexpr, BLOCK_S: tl.constexpr,
             STAT: tl.constexpr):
    """The row's statistic from its ``P`` pieces' at ``base`` (Chan's parallel formula for
    ``MEAN_VAR``). Read through L2 (``.cg``): in the cooperative kernel other programs
    wrote them moments ago."""
    p = tl.arange(0, BLOCK_S)
    ok = p < P
    a = tl.load(s1_ptr + base + p, mask=ok, other=0.0, cache_modifier=".cg")
    if STAT == 0:
        b = tl.load(s2_ptr + base + p, mask=ok, other=0.0, cache_modifier=".cg")
        counts = tl.minimum(tl.maximum(N - p * CHUNK, 0), CHUNK).to(tl.float32)
        counts = tl.where(ok, counts, 0.0)
        mean = tl.sum(counts * a, axis=0) / N
        dev = a - mean
        return mean, tl.sum(b + counts * dev * dev, axis=0)
    else:
        return tl.sum(a, axis=0), tl.full((), 0.0, tl.float32)


@triton.jit
def _row_stat(a_p, b_p, s1_ptr, s2_ptr, cnt_ptr, x_row, row, piece, R, N, P, max_spins,
              CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, FALLBACK_TILE: tl.constexpr,
              STAT: tl.constexpr, PHASE: tl.constexpr):
    """The row's statistic, given this piece's partial (``a_p``, ``b_p``; unused in
    ``PHASE`` 2): ``PHASE`` 0 stores it, waits for the row's other pieces and combines them
    (a program that gave up waiting reads the row whole); 1 stores it; 2 combines."""
    if PHASE != 2:
        tl.store(s1_ptr + row * P + piece, a_p)
        if STAT == 0:
            tl.store(s2_ptr + row * P + piece, b_p)
    a = a_p
    b = b_p
    if PHASE == 0:
        if arrive_and_wait(cnt_ptr, row, R, P, max_spins):
            a, b = _combine(s1_ptr, s2_ptr, row * P, P, N, CHUNK, BLOCK_S, STAT)
        else:
            a, b = _stats_by_tiles(x_row, 0, N, FALLBACK_TILE, STAT)
    elif PHASE == 2:
        a, b = _combine(s1_ptr, s2_ptr, row * P, P, N, CHUNK, BLOCK_S, STAT)
    return a, b


@triton.jit
def _scale_shift(a, b, N, eps, y_dtype: tl.constexpr, STAT: tl.constexpr):
    """(shift, scale) with ``y = (x - shift) * scale`` from the row's statistic."""
    if STAT == 0:
        shift = a
        scale = tl.rsqrt(b / N + eps)
    else:
        if STAT == 1:  # torch rounds the mean (or the norm) to its dtype, then divides
            d = cast_rne(a / N, y_dtype).to(tl.float32)
        else:  # F.normalize clamps the norm to eps (0 for a plain division: no clamp)
            d = cast_rne(tl.sqrt_rn(a), y_dtype).to(tl.float32)
            d = cast_rne(tl.where(d < eps, eps, d), y_dtype).to(tl.float32)
        shift = tl.full((), 0.0, tl.float32)
        scale = tl.div_rn(tl.full((), 1.0, tl.float32), d)
    return shift, scale


@triton.jit
def _write(x, y_row, cols, mask, other, shift, scale, w_ptr, b_ptr, row, first, GROUPS,
           PER_GROUP, SPATIAL, AFFINE: tl.constexpr, HAS_WEIGHT: tl.constexpr,
           HAS_BIAS: tl.constexpr, PIECE_CHANNEL: tl.constexpr, STREAM: tl.constexpr,
           KEEP: tl.constexpr):
    """Store ``x`` (at columns ``cols`` of the row; ``mask`` and ``other`` None for a whole
    piece, whose loads and stores then need no predicate per element) normalised, the
    weight and bias applied; the store with L2 eviction policy ``STREAM``, a weight and
    bias per column loaded with ``KEEP``."""
    if AFFINE == 2 and PIECE_CHANNEL:  # one channel: its weight and bias scalars
        c = (row % GROUPS) * PER_GROUP + first // SPATIAL
        if HAS_WEIGHT:
            scale = scale * tl.load(w_ptr + c).to(tl.float32)
        y = (x - shift) * scale
        if HAS_BIAS:
            y = y + tl.load(b_ptr + c).to(tl.float32)
    else:
        y = (x - shift) * scale
        if AFFINE == 1:
            at = cols
        else:  # (unused without a weight or bias)
            at = (row % GROUPS) * PER_GROUP + cols // SPATIAL
        if HAS_WEIGHT:
            y = y * tl.load(w_ptr + at, mask=mask, other=other,
                            eviction_policy=KEEP).to(tl.float32)
        if HAS_BIAS:
            y = y + tl.load(b_ptr + at, mask=mask, other=other,
                            eviction_policy=KEEP).to(tl.float32)
    tl.store(y_row + cols, cast_rne(y, y_row.dtype.element_ty), mask=mask,
             eviction_policy=STREAM)


@triton.jit
def _norm_kernel(x_ptr, y_ptr, w_ptr, b_ptr, s1_ptr, s2_ptr, cnt_ptr, R, N, stride_x,
                 stride_y, P, max_spins, eps, GROUPS, PER_GROUP, SPATIAL,
                 CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, FALLBACK_TILE: tl.constexpr,
                 STAT: tl.constexpr, AFFINE: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                 HAS_BIAS: tl.constexpr, PIECE_CHANNEL: tl.constexpr, STREAM: tl.constexpr,
                 KEEP: tl.constexpr, PHASE: tl.constexpr):
    """Program (piece, lane) of a P x G grid, over rows lane, lane + G, ...

    ``PHASE`` 0, one launch: the piece's partial statistic, a wait for the row's other
    pieces (``cooperative.arrive_and_wait``), the combination and the write from
    registers. ``PHASE`` 1 then 2, two launches: the partials, then the combination and
    the write, loading the piece again. ``PHASE`` 3: the row is this one piece (P = 1),
    masked, one pass.

    A whole piece is loaded and stored without masks: a predicate per element would keep
    the kernel over the 128 registers a thread that two programs a SM allow (255 for
    LayerNorm's weight and bias, compiled for sm_90). The partial last piece of a row whose
    length is not a multiple of ``CHUNK`` is read in masked tiles instead, for its partial
    and again (from L2, moments later) for its write.

    Whole pieces are loaded and stored with L2 eviction policy ``STREAM`` (each is read
    and written once), a weight and bias per column loaded with ``KEEP`` (a program reads
    the same slice of them for every row it walks: ``_COOP_L2_HINTS``).
    """
    piece = tl.program_id(0)
    lane = tl.program_id(1).to(tl.int64)  # and so the rows: row * stride in int64
    G = tl.num_programs(1)
    first = piece * CHUNK
    cols = first + tl.arange(0, CHUNK)
    y_dtype: tl.constexpr = y_ptr.dtype.element_ty
    for row in range(lane, R, G):
        x_row = x_ptr + row * stride_x
        y_row = y_ptr + row * stride_y
        if PHASE == 3:
            mask = cols < N
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            a, b = _piece_stats(x, N * 1.0, mask, STAT)
            shift, scale = _scale_shift(a, b, N, eps, y_dtype, STAT)
            _write(x, y_row, cols, mask, 0.0, shift, scale, w_ptr, b_ptr, row, first, GROUPS,
                   PER_GROUP, SPATIAL, AFFINE, HAS_WEIGHT, HAS_BIAS, PIECE_CHANNEL, "", "")
        elif first + CHUNK <= N:
            x = tl.load(x_row + cols, eviction_policy=STREAM).to(tl.float32)
            a_p, b_p = _piece_stats(x, CHUNK * 1.0, None, STAT)
            a, b = _row_stat(a_p, b_p, s1_ptr, s2_ptr, cnt_ptr, x_row, row, piece, R, N, P,
                             max_spins, CHUNK, BLOCK_S, FALLBACK_TILE, STAT, PHASE)
            if PHASE != 1:
                shift, scale = _scale_shift(a, b, N, eps, y_dtype, STAT)
                _write(x, y_row, cols, None, None, shift, scale, w_ptr, b_ptr, row, first,
                       GROUPS, PER_GROUP, SPATIAL, AFFINE, HAS_WEIGHT, HAS_BIAS,
                       PIECE_CHANNEL, STREAM, KEEP)
        else:  # the partial last piece, in tiles
            a_p, b_p = _stats_by_tiles(x_row, first, N, FALLBACK_TILE, STAT)
            a, b = _row_stat(a_p, b_p, s1_ptr, s2_ptr, cnt_ptr, x_row, row, piece, R, N, P,
                             max_spins, CHUNK, BLOCK_S, FALLBACK_TILE, STAT, PHASE)
            if PHASE != 1:
                shift, scale = _scale_shift(a, b, N, eps, y_dtype, STAT)
                t = tl.arange(0, FALLBACK_TILE)
                for at in range(first, N, FALLBACK_TILE):
                    mask = at + t < N
                    xs = tl.load(x_row + at + t, mask=mask, other=0.0).to(tl.float32)
                    _write(xs, y_row, at + t, mask, 0.0, shift, scale, w_ptr, b_ptr, row,
                           first, GROUPS, PER_GROUP, SPATIAL, AFFINE, HAS_WEIGHT, HAS_BIAS,
                           PIECE_CHANNEL, "", "")


def plan(rows: int, n: int, sms: int, interpret: bool = INTERPRET,
         max_tile: int | None = None, chunk: int | None = None,
         per_sm: int | None = None) -> RowPlan:
    """``cooperative.plan_rows`` with this kernel's figures: pieces of ``chunk`` (default
    ``_COOP_CHUNK``), ``per_sm`` programs a SM (default ``cooperative.PER_SM``), one
    program a row up to ``max_tile`` (default a piece)."""
    chunk = chunk or _COOP_CHUNK
    return plan_rows(rows, n, sms, interpret, per_sm or PER_SM, chunk,
                     chunk if max_tile is None else max_tile)


def norm_rows(rows: torch.Tensor, y: torch.Tensor, stat: int, eps: float = 0.0,
              weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
              affine: int = NO_AFFINE, groups: int = 1, per_group: int = 1,
              spatial: int = 1, row_plan: RowPlan | None = None, cooperative: bool = True,
              max_spins: int = MAX_SPINS) -> torch.Tensor:
    """Write the normalisation ``stat`` of ``rows`` ([R, n], unit column stride) into ``y``
    ([R, n], unit column stride) along ``row_plan`` (default ``plan``'s), the weight and
    bias flat, addressed per ``affine`` (``groups``, ``per_group`` and ``spatial`` give a
    column's channel: the module docstring). ``cooperative=False`` takes the two launches
    of ``rows`` where the plan says ``coop`` or ``pieces`` (for comparison). Returns the
    rows' arrival counters and, last, the gave-up flag (all zero off the ``coop`` path's
    one launch)."""
    r, n = rows.shape
    if n >= 2**31:
        raise ValueError(f"rows of {n} elements: this kernel indexes a row in int32")
    cnt = counters(r, rows.device)
    if not (r and n):
        return cnt
    row_plan = row_plan or plan(r, n, sm_count(str(rows.device)),
                                INTERPRET or rows.device.type != "cuda")
    if not cooperative and row_plan.kind in ("coop", "pieces"):
        row_plan = RowPlan("rows")
    tile = row_plan.kind == "tile"
    chunk = triton.next_power_of_2(n) if tile else _COOP_CHUNK
    p = -(-n // chunk)
    if row_plan.kind in ("coop", "pieces") and row_plan.pieces != p:
        raise ValueError(f"{row_plan} cuts rows of {n} into {row_plan.pieces} pieces; pieces "
                         f"of {chunk} make {p}")
    s1 = torch.empty((r, p), dtype=torch.float32, device=rows.device)
    s2 = torch.empty_like(s1) if stat == MEAN_VAR else s1
    piece_channel = per_group == 1 or spatial % chunk == 0
    args = (rows, y, weight if weight is not None else rows,
            bias if bias is not None else rows, s1, s2, cnt, r, n, rows.stride(0),
            y.stride(0), p, max_spins, eps, groups, per_group, spatial)
    consts = dict(CHUNK=chunk, BLOCK_S=triton.next_power_of_2(p),
                  FALLBACK_TILE=FALLBACK_TILE, STAT=stat, AFFINE=affine,
                  HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
                  PIECE_CHANNEL=piece_channel,
                  STREAM="evict_first" if _COOP_L2_HINTS and not tile else "",
                  KEEP="evict_last" if _COOP_L2_HINTS and not tile else "")
    if tile:
        consts["num_warps"] = max(1, min(_COOP_WARPS, chunk // 1024))
    else:
        consts.update(num_warps=_COOP_WARPS, maxnreg=_COOP_MAXNREG)
    if tile:
        _norm_kernel[(1, min(r, _MAX_LANES))](*args, PHASE=3, **consts)
    elif row_plan.kind == "rows":
        for phase in (1, 2):
            _norm_kernel[(p, min(r, _MAX_LANES))](*args, PHASE=phase, **consts)
    else:
        launch(_norm_kernel, args, consts, row_plan, rows.device)
    return cnt


# whether :func:`div_by_row_norm` takes the cooperative path by default on a GPU: no. At
# KernelBench 38/39's size (32768 rows of 65535) it took 11.1 ms (L1) and 11.0 ms (L2)
# against 10.4 and 10.9 ms in two launches on an H100, and eager's L2 took 9.8 ms
# (benchmarks/results/2026-12-06-h100-s22/probes/norm_probe.json). GroupNorm and
# InstanceNorm keep it (6.3 and 5.5 ms against 7.3 ms in two launches there).
DIV_COOP_DEFAULT_GPU = False


def div_by_row_norm(x: torch.Tensor, norm: str, eps: float = 0.0, *,
                    cooperative: bool | None = None) -> torch.Tensor:
    """``x`` divided by a statistic of its last dim: ``norm="mean_abs"`` is ``x /
    x.abs().mean(-1, keepdim=True)``, ``norm="l2"`` is ``x / torch.norm(x, p=2, dim=-1,
    keepdim=True)``, and with ``eps > 0`` ``F.normalize(x, dim=-1, eps=eps)`` (the norm
    clamped to ``eps``; ``eps`` is ignored for ``"mean_abs"``); computed in fp32, the
    statistic rounded to ``x``'s dtype as PyTorch's is, the output in ``x``'s dtype.
    ``cooperative`` as for ``norm_rows``; None, the default, is True on a CPU and under
    the interpreter and ``DIV_COOP_DEFAULT_GPU`` on a GPU (measured slower there: off)."""
    if cooperative is None:
        cooperative = DIV_COOP_DEFAULT_GPU or INTERPRET or x.device.type != "cuda"
    stats = {"mean_abs": MEAN_ABS, "l2": L2}
    if norm not in stats:
        raise ValueError(f"unknown row norm {norm!r}; use one of {', '.join(stats)}")
    rows = x.reshape(-1, x.shape[-1]) if x.dim() else x.reshape(1, 1)
    if rows.stride(-1) != 1 and rows.shape[-1] > 1:
        rows = rows.contiguous()
    y = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    norm_rows(rows, y, stats[norm], eps=float(eps) if norm == "l2" else 0.0,
              cooperative=cooperative)
    return y.view(x.shape)
