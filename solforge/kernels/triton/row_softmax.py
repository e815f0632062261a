"""Row softmax and log-softmax over the last dim with fp32 math, any input dtype, any output
dtype.

Rows that fit one tile (up to 8192 elements on a GPU) are read once and kept in registers.
Longer rows (vocabularies, KernelBench's 4096 x 393216) take one of three paths, chosen by
``plan_rows`` (a pure function of rows, row length, SM count and the interpreter flag):

- ``coop``: many long rows on a GPU: the one-read cooperative path
  (``cooperative``'s docstring). Each row is cut into P pieces of ``_COOP_CHUNK``; program
  (piece, lane) holds its piece in registers, writes the piece's max and sum of exp, waits
  for the row's other pieces, combines the P partials into the row's max and sum, and
  writes its piece normalised from its registers: one read and one write of DRAM, where
  the two-pass path reads twice (KernelBench's 23_Softmax on an H100: 4.9 ms, two-pass
  6.5, eager PyTorch 8.4, one read and one write at 3.35 TB/s 3.85).
- ``pieces``: the same kernel in two launches (partials, then combine and write, reading
  the input again), for the interpreter, which runs programs one after another and so
  could not run the spin-wait: CPU tests cover the pieces' math and the dispatch there. A
  GPU where not even one row's P programs can be resident at once takes it too.
- ``rows``: everything else: each row over several programs when there are too few long
  rows to fill the GPU (batch-1 to batch-64 sampling over a 128k vocabulary;
  ``_common.row_splits``: the first launch writes each piece's max and sum, the second
  combines them and writes the piece normalised), else one program per row and two passes
  over it (an online max/sum, then the normalised write).

A tile or piece that is all -inf (masked logits) adds nothing to the sum; a row that is
all -inf comes out NaN, as PyTorch's does. Log-softmax is the same passes with
``x - max - log(sum)`` written (``LOG``). A program that gave up waiting for its row's
other pieces (``cooperative``) reads the row whole, the two-pass way, and writes its piece.

Not covered: a dim other than the last; masks or scaling fused in (apply them to the
input); the ``coop`` path under the interpreter (the tests run its kernel directly there,
where every piece but a row's last gives up waiting after 2 polls and takes the fallback).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    INTERPRET,
    as_rows,
    autotune_configs,
    cast_rne,
    piece_of_row,
    row_splits,
    sm_count,
)
from solforge.kernels.triton.cooperative import (
    FALLBACK_TILE,
    MAX_SPINS,
    PER_SM,
    RowPlan,
    arrive_and_wait,
    counters,
    launch,
)
from solforge.kernels.triton.cooperative import plan_rows as _plan_rows

# The interpreter's tile is small so CPU runs exercise the multi-tile path too.
_MAX_TILE = 128 if INTERPRET else 8192

_CONFIGS = autotune_configs(
    [triton.Config({}, num_warps=w) for w in (4, 8, 16)],
    triton.Config({}, num_warps=4),
)


@triton.jit
def _online_update(m, total, x):
    """The running (max, sum of exp(x - max)) after tile ``x``; a tile that is all -inf
    while the max is still -inf leaves (-inf, 0) rather than NaN."""
    m_new = tl.maximum(m, tl.max(x, axis=0))
    safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new, total * tl.exp(m - safe) + tl.sum(tl.exp(x - safe), axis=0)


@triton.autotune(configs=_CONFIGS, key=["N"])
@triton.jit
def _softmax_kernel(x_ptr, y_ptr, N, stride_x, stride_y,
                    BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr, LOG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    if ONE_TILE:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        e = tl.exp(shifted)
        if LOG:
            y = shifted - tl.log(tl.sum(e, axis=0))
        else:
            y = e * (1.0 / tl.sum(e, axis=0))
        tl.store(y_row + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.full((), float("-inf"), tl.float32)
        total = tl.full((), 0.0, tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            m, total = _online_update(m, total, x)
        inv = 1.0 / total
        log_total = tl.log(total)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            if LOG:
                y = x - m - log_total
            else:
                y = tl.exp(x - m) * inv
            tl.store(y_row + start + cols, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


# the tile of the split kernels (a piece is a multiple of it)
_SPLIT_TILE = 128 if INTERPRET else 2048
_SPLIT_WARPS = 4 if INTERPRET else 8


@triton.jit
def _combine(m_ptr, l_ptr, base, S, BLOCK_S: tl.constexpr):
    """A row's (max, sum of exp(x - max)) from its ``S`` pieces' at ``base``. Read through
    L2 (``.cg``): in the cooperative kernel other programs wrote them moments ago."""
    p = tl.arange(0, BLOCK_S)
    ms = tl.load(m_ptr + base + p, mask=p < S, other=float("-inf"), cache_modifier=".cg")
    ls = tl.load(l_ptr + base + p, mask=p < S, other=0.0, cache_modifier=".cg")
    m = tl.max(ms, axis=0)
    safe = tl.where(m == float("-inf"), 0.0, m)
    return m, tl.sum(ls * tl.exp(ms - safe), axis=0)


@triton.jit
def _normalised(x, m, total, LOG: tl.constexpr):
    """``x``'s softmax (or log-softmax) given its row's max and sum; a row that is all -inf
    (max -inf, sum 0) gives NaN either way."""
    if LOG:
        return x - tl.where(m == float("-inf"), 0.0, m) - tl.log(total)
    else:
        return tl.exp(x - m) * (1.0 / total)


@triton.jit
def _softmax_pieces_kernel(x_ptr, m_ptr, l_ptr, N, stride_x, CHUNK, S,
                           BLOCK_N: tl.constexpr):
    """Program (row, piece): the piece's max and sum of exp(x - max)."""
    row, piece, first, x_row = piece_of_row(x_ptr, stride_x, CHUNK)
    cols = tl.arange(0, BLOCK_N)
    m = tl.full((), float("-inf"), tl.float32)
    total = tl.full((), 0.0, tl.float32)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        x = tl.load(x_row + idx, mask=idx < N, other=float("-inf")).to(tl.float32)
        m, total = _online_update(m, total, x)
    tl.store(m_ptr + row * S + piece, m)
    tl.store(l_ptr + row * S + piece, total)


@triton.jit
def _softmax_pieces_write_kernel(x_ptr, y_ptr, m_ptr, l_ptr, N, stride_x, stride_y, CHUNK,
                                 S, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                                 LOG: tl.constexpr):
    """Program (row, piece): the row's max and sum from its pieces', then the piece
    normalised."""
    row, piece, first, x_row = piece_of_row(x_ptr, stride_x, CHUNK)
    m, total = _combine(m_ptr, l_ptr, row * S, S, BLOCK_S)
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, CHUNK, BLOCK_N):
        idx = first + start + cols
        mask = idx < N
        x = tl.load(x_row + idx, mask=mask, other=float("-inf")).to(tl.float32)
        y = _normalised(x, m, total, LOG)
        tl.store(y_row + idx, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


# The cooperative path (module docstring). A piece is one tile held in registers by one
# program: on a GPU 16384 fp32 over 8 warps (64 a thread, 128 registers: 2 programs a SM).
# A program's wait for a row's other pieces costs about as long as loading its own piece,
# so the bytes a wait covers set the speed: 4096 x 393216 fp32 on an H100 (Triton 3.6)
# took 4.9 ms with pieces of 16384, 7.4 ms with pieces of 8192 (two-pass path 6.5 ms,
# eager PyTorch 8.4 ms, one read and one write at 3.35 TB/s 3.85 ms). The interpreter's
# piece is small so CPU shapes cut into several.
_COOP_CHUNK = 128 if INTERPRET else 16384
_COOP_WARPS = 4 if INTERPRET else 8
# Load the next row's piece before waiting for this one's, so a program's loads never stop
# (twice the registers: 16 warps for pieces of 16384). Built and tested under the
# interpreter, compiled for sm_90, not yet timed on a GPU (benchmarks/gpu/softmax_probe.py
# --prefetch): off until it is.
_COOP_PREFETCH = False


@triton.jit
def _piece_partials(x, m_ptr, l_ptr, at):
    """Store tile ``x``'s max and sum of exp(x - max) at ``at``."""
    m = tl.max(x, axis=0)
    tl.store(m_ptr + at, m)
    tl.store(l_ptr + at, tl.sum(tl.exp(x - tl.where(m == float("-inf"), 0.0, m)), axis=0))


@triton.jit
def _wait_and_combine(x_ptr, m_ptr, l_ptr, cnt_ptr, row, R, N, stride_x, P, max_spins,
                      BLOCK_S: tl.constexpr, FALLBACK_TILE: tl.constexpr):
    """Signal this piece's partials of ``row``, wait for the row's other pieces
    (``cooperative.arrive_and_wait``) and return the row's (max, sum); a program that gave
    up waiting reads the row whole, here."""
    if arrive_and_wait(cnt_ptr, row, R, P, max_spins):
        m, total = _combine(m_ptr, l_ptr, row * P, P, BLOCK_S)
    else:
        m = tl.full((), float("-inf"), tl.float32)
        total = tl.full((), 0.0, tl.float32)
        tile = tl.arange(0, FALLBACK_TILE)
        for start in range(0, N, FALLBACK_TILE):
            xs = tl.load(x_ptr + row * stride_x + start + tile, mask=start + tile < N,
                         other=float("-inf")).to(tl.float32)
            m, total = _online_update(m, total, xs)
    return m, total


@triton.jit
def _softmax_coop_kernel(x_ptr, y_ptr, m_ptr, l_ptr, cnt_ptr, R, N, stride_x, stride_y, P,
                         max_spins, CHUNK: tl.constexpr, BLOCK_S: tl.constexpr,
                         FALLBACK_TILE: tl.constexpr, LOG: tl.constexpr,
                         PHASE: tl.constexpr, PREFETCH: tl.constexpr = False):
    """Program (piece, lane) of a P x G grid, over rows lane, lane + G, ...

    ``PHASE`` 0, one launch: the piece's partials, a wait for the row's other pieces on
    ``cnt_ptr[row]`` (``cnt_ptr[R]`` set once any program gave up waiting, so the others
    stop waiting too), the combination and the write from registers; with ``PREFETCH``
    the next row's piece is loaded before the wait. ``PHASE`` 1 then 2, two launches: the
    partials, then the combination and the write, loading the piece again.
    """
    piece = tl.program_id(0)
    lane = tl.program_id(1).to(tl.int64)  # and so the rows: row * stride in int64
    G = tl.num_programs(1)
    cols = piece * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    if PHASE == 0 and PREFETCH:
        x = tl.load(x_ptr + lane * stride_x + cols, mask=mask,
                    other=float("-inf")).to(tl.float32)
        for row in range(lane, R, G):
            _piece_partials(x, m_ptr, l_ptr, row * P + piece)
            nxt = row + G
            x_next = tl.load(x_ptr + nxt * stride_x + cols,
                             mask=cols < tl.where(nxt < R, N, 0),
                             other=float("-inf")).to(tl.float32)
            m, total = _wait_and_combine(x_ptr, m_ptr, l_ptr, cnt_ptr, row, R, N, stride_x,
                                         P, max_spins, BLOCK_S, FALLBACK_TILE)
            y = _normalised(x, m, total, LOG)
            tl.store(y_ptr + row * stride_y + cols, cast_rne(y, y_ptr.dtype.element_ty),
                     mask=mask)
            x = x_next
    else:
        for row in range(lane, R, G):
            x = tl.load(x_ptr + row * stride_x + cols, mask=mask,
                        other=float("-inf")).to(tl.float32)
            if PHASE != 2:
                _piece_partials(x, m_ptr, l_ptr, row * P + piece)
            if PHASE == 0:
                m, total = _wait_and_combine(x_ptr, m_ptr, l_ptr, cnt_ptr, row, R, N,
                                             stride_x, P, max_spins, BLOCK_S, FALLBACK_TILE)
            elif PHASE == 2:
                m, total = _combine(m_ptr, l_ptr, row * P, P, BLOCK_S)
            if PHASE != 1:
                y = _normalised(x, m, total, LOG)
                tl.store(y_ptr + row * stride_y + cols, cast_rne(y, y_ptr.dtype.element_ty),
                         mask=mask)


def plan_rows(rows: int, n: int, sms: int, interpret: bool = INTERPRET,
              per_sm: int | None = None, chunk: int | None = None,
              max_tile: int = _MAX_TILE) -> RowPlan:
    """``cooperative.plan_rows`` with the softmax's figures: one tile up to ``max_tile``,
    pieces of ``chunk`` (default ``_COOP_CHUNK``), ``per_sm`` programs a SM (default
    ``cooperative.PER_SM``). Rows of one piece take the ``rows`` paths: the two-pass
    path's second read of so short a row mostly hits L2 (4096 x 12000 on an H100: 0.16 ms,
    against 0.20 ms cooperative in pieces of 8192)."""
    return _plan_rows(rows, n, sms, interpret, per_sm or PER_SM, chunk or _COOP_CHUNK,
                      max_tile)


def softmax(x: torch.Tensor, out_dtype: torch.dtype | None = None, *,
            cooperative: bool = True) -> torch.Tensor:
    """``softmax(x, dim=-1)`` computed in fp32, written as ``out_dtype`` (default ``x``'s).

    ``softmax(s, out_dtype=torch.float32)`` is ``s.softmax(-1, dtype=torch.float32)``;
    ``softmax(s)`` on bf16 scores is HF's ``softmax(s, dtype=float32).to(s.dtype)``.
    ``cooperative=False`` keeps long rows off the one-read path (``plan_rows``), for
    comparison with the two-pass ones.
    """
    return _rows(x, out_dtype, log=False, cooperative=cooperative)


def log_softmax(x: torch.Tensor, out_dtype: torch.dtype | None = None, *,
                cooperative: bool = True) -> torch.Tensor:
    """``log_softmax(x, dim=-1)`` computed in fp32 (``x - max - log(sum(exp(x - max)))``),
    written as ``out_dtype`` (default ``x``'s): KernelBench's LogSoftmax, a loss's
    log-probabilities over a vocabulary. ``cooperative`` as for ``softmax``."""
    return _rows(x, out_dtype, log=True, cooperative=cooperative)


def _rows(x: torch.Tensor, out_dtype: torch.dtype | None, log: bool,
          cooperative: bool) -> torch.Tensor:
    n = x.shape[-1]
    rows = as_rows(x)
    y = torch.empty(rows.shape, dtype=out_dtype or x.dtype, device=x.device)
    if not (rows.shape[0] and n):
        return y.view(x.shape)
    interpret = INTERPRET or x.device.type != "cuda"
    plan = plan_rows(rows.shape[0], n, sm_count(str(x.device)), interpret)
    if plan.kind in ("coop", "pieces") and cooperative:
        _cooperative(rows, y, plan, log)
        return y.view(x.shape)
    # rows past one tile take two passes anyway: splitting them costs only the pieces' sums
    pieces, chunk = (row_splits(rows.shape[0], n, x.device, _SPLIT_TILE) if n > _MAX_TILE
                     else (1, n))
    if pieces > 1:
        m = torch.empty((rows.shape[0], pieces), dtype=torch.float32, device=x.device)
        total = torch.empty_like(m)
        grid = (rows.shape[0], pieces)
        _softmax_pieces_kernel[grid](rows, m, total, n, rows.stride(0), chunk, pieces,
                                     BLOCK_N=_SPLIT_TILE, num_warps=_SPLIT_WARPS)
        _softmax_pieces_write_kernel[grid](rows, y, m, total, n, rows.stride(0), y.stride(0),
                                           chunk, pieces, BLOCK_N=_SPLIT_TILE,
                                           BLOCK_S=triton.next_power_of_2(pieces),
                                           LOG=log, num_warps=_SPLIT_WARPS)
    else:
        block = min(triton.next_power_of_2(n), _MAX_TILE)
        _softmax_kernel[(rows.shape[0],)](rows, y, n, rows.stride(0), y.stride(0),
                                          BLOCK_N=block, ONE_TILE=n <= block, LOG=log)
    return y.view(x.shape)


def _cooperative(rows: torch.Tensor, y: torch.Tensor, plan: RowPlan, log: bool,
                 max_spins: int = MAX_SPINS) -> torch.Tensor:
    """``plan``'s launches of ``_softmax_coop_kernel`` (``cooperative.launch``). Returns
    the rows' arrival counters and, last, the gave-up flag (tests check that no program
    gave up)."""
    r, n = rows.shape
    p = plan.pieces
    m = torch.empty((r, p), dtype=torch.float32, device=rows.device)
    total = torch.empty_like(m)
    cnt = counters(r, rows.device)
    args = (rows, y, m, total, cnt, r, n, rows.stride(0), y.stride(0), p, max_spins)
    consts = dict(CHUNK=_COOP_CHUNK, BLOCK_S=triton.next_power_of_2(p),
                  FALLBACK_TILE=FALLBACK_TILE, LOG=log, num_warps=_COOP_WARPS,
                  PREFETCH=_COOP_PREFETCH)
    launch(_softmax_coop_kernel, args, consts, plan, rows.device)
    return cnt
