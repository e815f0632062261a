"""Cumulative sums and products along one dim (``torch.cumsum`` / ``torch.cumprod``), with
PyTorch's own arithmetic: ATen's CUDA scan, its sums in its order, so the output is
PyTorch's bit for bit; optionally fused with a multiplier read beside the input
(``cumsum(x * mask)``), a reversed direction (``cumsum(x.flip(d), d).flip(d)``) and the
exclusive form (a zero, then the scan of all but the last element).

ATen's CUDA scan (``aten/src/ATen/native/cuda/ScanUtils.cuh``, ``scan_dim``) makes the
input contiguous and then takes one of three paths:

- the scanned dim is the last one: each row is cut into chunks of ``2 * nx`` elements,
  ``nx = 2 ** log_nx`` with ``log_nx`` from the row length and the row count
  (``get_log_num_threads_x_inner_scan``, in unsigned 32-bit arithmetic, clamped to
  [4, 9]); the running total of the earlier chunks is combined into the chunk's first
  element, then a Sklansky scan runs over the chunk (``log_nx + 1`` steps; at step ``m``
  each element in the upper half of a ``2 ** (m + 1)`` block takes ``own op last of the
  lower half``), and the chunk's last element is the next running total;
- another dim: one thread per column of the inner dims, combining left to right;
- the tensor is one row (``numel == size(dim)``): CUB's device scan, whose order this
  module does not reproduce, so PyTorch's own call runs there.

Each combine of a half-precision type rounds to that type (``c10::Half`` /
``c10::BFloat16`` arithmetic is fp32 rounded back); fp32 and fp64 combine in their own
precision. :func:`cumulative` runs the same combines in the same order: the last-dim path
keeps a tile of rows and one chunk of each, and takes each Sklansky step as a gather of
the lower half's last element (``tl.gather``: a copy, no arithmetic); the other path
keeps a block of columns and walks the dim. Memory is read and written once, where eager
``cumsum(x * mask)`` writes and reads the product in between and its scan kernel reaches
about 1.2 TB/s on an H100 (KernelBench ``93_masked_cumsum``: 8.7 ms).

Where PyTorch's own call runs instead: a one-row tensor (CUB), a CPU tensor outside the
interpreter, a tensor of 2**32 elements or more (ATen's row offsets are 32-bit there),
integer and complex dtypes. Not covered: ``cummax``/``cummin``/``logcumsumexp``; a
multiplier that broadcasts or promotes the dtype (the product is then made by PyTorch
first, still exact, unfused); bit-equality on other backends than ATen's CUDA kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import INTERPRET, autotune_configs, cast_rne, sm_count

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_OPS = ("sum", "prod")
# CUDA caps grid axis 1 at 65535 programs
_MAX_GRID_1 = 65535


def log_nx(num_rows: int, row_size: int) -> int:
    """ATen's ``get_log_num_threads_x_inner_scan`` for ``uint32_t``: the log2 of the
    threads along a row, half of a chunk. Its difference of two logs is unsigned, so a
    row count more than 2**9 times the row length wraps around and clamps to 9."""
    lx = max(0, (row_size - 1).bit_length())  # the smallest k with 2**k >= row_size
    ly = max(0, (num_rows - 1).bit_length())
    diff = (lx - ly) % 2 ** 32
    return min(max(4, ((9 + diff) % 2 ** 32) // 2), 9)


def _row_configs() -> list[triton.Config]:
    # the H100 chose 16-32 rows a program for 32,768 rows (session 30); few long rows (a
    # top-p filter's cumsum over a 128k vocabulary, batch 8) need a program a row or two,
    # as ATen runs them (one row a block where a row takes 512 threads)
    gpu = [triton.Config({"BLOCK_R": r}, num_warps=w, num_stages=s)
           for r, w, s in ((1, 4, 3), (2, 4, 3), (4, 4, 3), (8, 4, 3), (16, 4, 3),
                           (32, 4, 3), (64, 4, 3), (32, 8, 3), (64, 8, 3), (128, 8, 2))]
    return autotune_configs(gpu, triton.Config({"BLOCK_R": 2}, num_warps=1))


def _enough_programs(configs: list[triton.Config], named_args: dict,
                     **kwargs) -> list[triton.Config]:
    """Tiles of rows that leave at least two programs an SM (or a program a row, for
    fewer rows than that): a tile of 16 rows over 8 rows is one SM's work. Tiles under
    16 rows only where the rows are that few (they are not tried for 32,768 rows)."""
    rows = named_args["ROWS"]
    want = min(rows, 2 * sm_count(str(named_args["x_ptr"].device)))
    kept = [c for c in configs if -(-rows // c.kwargs["BLOCK_R"]) >= want and
            (c.kwargs["BLOCK_R"] >= 16 or rows < 16 * want)]
    return kept or [min(configs, key=lambda c: c.kwargs["BLOCK_R"])]


def _col_configs() -> list[triton.Config]:
    gpu = [triton.Config({"BLOCK_I": b}, num_warps=w, num_stages=s)
           for b, w, s in ((128, 4, 3), (256, 4, 3), (512, 4, 3), (1024, 8, 3))]
    return autotune_configs(gpu, triton.Config({"BLOCK_I": 4}, num_warps=1))


@triton.jit
def _combine(a, b, PROD: tl.constexpr, ROUND: tl.constexpr, OUT: tl.constexpr):
    """``a op b`` in the accumulation type, rounded to the storage type when ``ROUND``
    (c10's half-precision arithmetic)."""
    if PROD:
        v = a * b
    else:
        v = a + b
    if ROUND:
        v = cast_rne(v, OUT).to(a.dtype)
    return v


@triton.jit
def _load(x_ptr, m_ptr, offs, live, ACC: tl.constexpr, OUT: tl.constexpr,
          INIT: tl.constexpr, HAS_MUL: tl.constexpr, ROUND: tl.constexpr):
    """The scanned value at ``offs``: ``x`` (``INIT`` where not live), times the
    multiplier's value when ``HAS_MUL``, rounded as the eager product is."""
    v = tl.load(x_ptr + offs, mask=live, other=INIT).to(ACC)
    if HAS_MUL:
        mv = tl.load(m_ptr + offs, mask=live, other=1).to(ACC)
        v = v * mv
        if ROUND:
            v = cast_rne(v, OUT).to(ACC)
    return v


@triton.jit
def _scan_rows_body(x_ptr, m_ptr, y_ptr, ROWS, N, X_STRIDE, Y_STRIDE,
                    PROD: tl.constexpr, HAS_MUL: tl.constexpr, REVERSE: tl.constexpr,
                    EXCLUSIVE: tl.constexpr, ROUND: tl.constexpr, F64: tl.constexpr,
                    LOG_C: tl.constexpr, BLOCK_R: tl.constexpr):
    ACC: tl.constexpr = tl.float64 if F64 else tl.float32
    C: tl.constexpr = 1 << LOG_C
    INIT: tl.constexpr = 1.0 if PROD else 0.0
    OUT: tl.constexpr = y_ptr.dtype.element_ty
    r = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    j = tl.arange(0, C)
    rows_live = r < ROWS
    x_row = r[:, None] * X_STRIDE
    y_row = r[:, None] * Y_STRIDE
    # a reversed chunk is read and written in ascending addresses (aligned, vectorised)
    # and reversed in registers: addressed back to front, the H100 ran at half the speed
    back = tl.broadcast_to((C - 1 - j)[None, :], (BLOCK_R, C))
    carry = tl.full((BLOCK_R,), INIT, dtype=ACC)
    # the exclusive form writes width = N + 1 outputs: tile k holds the running total
    # before chunk k, then the chunk's first C - 1 results (a shift in registers, so the
    # stores stay aligned; chunk k's last result opens tile k + 1)
    for k in range(0, tl.cdiv(N + EXCLUSIVE, C)):
        if REVERSE:
            col = N - (k + 1) * C + j
            live = rows_live[:, None] & (col >= 0)[None, :]
        else:
            col = k * C + j
            live = rows_live[:, None] & (col < N)[None, :]
        v = _load(x_ptr, m_ptr, x_row + col[None, :], live, ACC, OUT, INIT, HAS_MUL, ROUND)
        if REVERSE:
            v = tl.gather(v, back, axis=1)
        # the running total of the earlier chunks joins the chunk's first element
        v = tl.where(j[None, :] == 0, _combine(v, carry[:, None], PROD, ROUND, OUT), v)
        for m in tl.static_range(LOG_C):
            s = 1 << m
            last_low = (j & ~(2 * s - 1)) | (s - 1)
            g = tl.gather(v, tl.broadcast_to(last_low[None, :], (BLOCK_R, C)), axis=1)
            v = tl.where((j & s)[None, :] != 0, _combine(v, g, PROD, ROUND, OUT), v)
        out = v
        if REVERSE:
            out = tl.gather(v, back, axis=1)
        if EXCLUSIVE:
            prev = tl.broadcast_to(tl.maximum(j - 1, 0)[None, :], (BLOCK_R, C))
            lead = tl.where(k > 0, carry, 0.0)  # the zero in front (``zeros_like``)
            out = tl.where(j[None, :] == 0, lead[:, None], tl.gather(v, prev, axis=1))
            live = rows_live[:, None] & (col < N + 1)[None, :]
        tl.store(y_ptr + y_row + col[None, :], cast_rne(out, OUT), mask=live)
        # the chunk's last element (a sum with -0.0, the additive identity: exact)
        carry = tl.sum(tl.where(j[None, :] == C - 1, v, -0.0), axis=1)


@triton.jit
def _scan_cols_body(x_ptr, m_ptr, y_ptr, INNER, N, X_OUTER, Y_OUTER,
                    PROD: tl.constexpr, HAS_MUL: tl.constexpr, REVERSE: tl.constexpr,
                    EXCLUSIVE: tl.constexpr, ROUND: tl.constexpr, F64: tl.constexpr,
                    BLOCK_I: tl.constexpr):
    ACC: tl.constexpr = tl.float64 if F64 else tl.float32
    INIT: tl.constexpr = 1.0 if PROD else 0.0
    OUT: tl.constexpr = y_ptr.dtype.element_ty
    o = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    live = cols < INNER
    x_base = x_ptr + o * X_OUTER + cols
    y_base = y_ptr + o * Y_OUTER + cols
    if EXCLUSIVE:
        tl.store(y_base, tl.zeros((BLOCK_I,), dtype=OUT), mask=live)
    acc = tl.full((BLOCK_I,), INIT, dtype=ACC)
    for i in range(0, N):
        # 64-bit: one outer slice may hold 2**31 elements or more (``at * INNER`` in
        # 32 bits wraps there; ATen's offsets are unsigned 32-bit)
        at = tl.cast(N - 1 - i if REVERSE else i, tl.int64)
        v = _load(x_ptr, m_ptr, o * X_OUTER + at * INNER + cols, live, ACC, OUT, INIT,
                  HAS_MUL, ROUND)
        acc = _combine(acc, v, PROD, ROUND, OUT)
        tl.store(y_base + (at + EXCLUSIVE) * INNER, cast_rne(acc, OUT), mask=live)


# eager rounds the product before the scan adds it: a fused multiply-add would not
_NO_FMA = {"enable_fp_fusion": False}
_FLAGS = ["PROD", "HAS_MUL", "REVERSE", "EXCLUSIVE", "ROUND", "F64"]
_scan_rows = triton.autotune(configs=_row_configs(), key=["N", "LOG_C", "ROWS", *_FLAGS],
                             prune_configs_by={"early_config_prune": _enough_programs})(
    _scan_rows_body)
_scan_cols = triton.autotune(configs=_col_configs(), key=["N", "INNER", *_FLAGS])(
    _scan_cols_body)


def _pytorch_call(x: torch.Tensor, dim: int, op: str, multiplier: torch.Tensor | None,
                  reverse: bool, exclusive: bool) -> torch.Tensor:
    """The same result from PyTorch's own calls, composed as the eager forms are."""
    if multiplier is not None:
        x = x * multiplier
    # the zero in front: a slice of the input (the narrowed scan is empty where the dim
    # is one long)
    zero = torch.zeros_like(x.narrow(dim, 0, 1)) if exclusive else None
    if exclusive:
        x = x.narrow(dim, 0, x.shape[dim] - 1)
    if reverse:
        x = x.flip(dim)
    y = torch.cumsum(x, dim) if op == "sum" else torch.cumprod(x, dim)
    if reverse:
        y = y.flip(dim)
    if exclusive:
        y = torch.cat((zero, y), dim)
    return y


def _pytorch_runs_another_kernel(x: torch.Tensor, dim: int, n: int) -> bool:
    """Where ATen would not run the two scan kernels this module follows. One row is
    ``x.numel() == x.size(dim)``, not ``== n``: the exclusive form's narrowed copy (``n =
    size - 1`` long) is one row, CUB's scan, exactly where ``x`` is."""
    return (x.device.type != "cuda" and not INTERPRET) or x.numel() >= 2 ** 32 \
        or x.numel() == x.shape[dim] or n == 0 or x.numel() == 0


def cumulative(x: torch.Tensor, dim: int, op: str = "sum", *,
               multiplier: torch.Tensor | None = None, reverse: bool = False,
               exclusive: bool = False) -> torch.Tensor:
    """``torch.cumsum`` (``op='sum'``) or ``torch.cumprod`` (``'prod'``) of ``x`` (times
    ``multiplier`` first, when given) along ``dim``, ATen's CUDA arithmetic (module
    docstring). ``reverse``: scanned from the end (``cum*(x.flip(dim), dim).flip(dim)``).
    ``exclusive``: a zero, then the scan of all but the last element along ``dim`` (the
    output keeps ``x``'s shape). Raises ``ValueError`` for an op, dtype or dim it does not
    take; runs PyTorch's own calls where ATen would run another kernel."""
    if op not in _OPS:
        raise ValueError(f"cumulative: op {op!r} (one of {', '.join(_OPS)})")
    if x.dtype not in _FLOATS:
        raise ValueError(f"cumulative: dtype {x.dtype} (fp32, fp64, fp16, bf16)")
    if x.dim() == 0:
        raise ValueError("cumulative: a 0-d tensor has no dim to scan")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"cumulative: dim {dim} out of range for a {x.dim()}-d tensor")
    dim %= x.dim()
    if exclusive and reverse:
        raise ValueError("cumulative: exclusive and reverse together are not covered")
    if multiplier is not None and (multiplier.shape != x.shape or torch.result_type(
            x, multiplier) != x.dtype or multiplier.device != x.device):
        # a broadcast or a promotion: PyTorch makes the product (the same values)
        x, multiplier = x * multiplier, None
        if x.dtype not in _FLOATS:
            raise ValueError(f"cumulative: the product's dtype {x.dtype} is not covered")
    n = x.shape[dim] - (1 if exclusive else 0)
    if exclusive and n < 0:
        raise ValueError("cumulative: exclusive over an empty dim")
    if _pytorch_runs_another_kernel(x, dim, n):
        return _pytorch_call(x, dim, op, multiplier, reverse, exclusive)
    x = x.contiguous()
    m = multiplier.contiguous() if multiplier is not None else x
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    width = x.shape[dim]
    inner = x.numel() // (x.shape[:dim].numel() * width) if width else 0
    flags = dict(PROD=op == "prod", HAS_MUL=multiplier is not None, REVERSE=reverse,
                 EXCLUSIVE=int(exclusive), ROUND=x.dtype in (torch.float16, torch.bfloat16),
                 F64=x.dtype == torch.float64)
    if dim == x.dim() - 1:
        rows = x.numel() // width
        # ATen's chunk follows the scanned rows' length, n (the exclusive form scans
        # a narrowed copy of n = width - 1)
        # a chunk longer than the row pads it with the identity, which no earlier
        # element reads (a Sklansky step reads lower positions only): the scan over the
        # next power of two is the same, and saves the padding's work (rows of 20 take
        # chunks of 1,024 where the rows outnumber them 2**10 times over)
        log_c = min(log_nx(rows, n) + 1, max(1, (n - 1).bit_length()))
        _scan_rows[lambda meta: (triton.cdiv(rows, meta["BLOCK_R"]),)](
            x, m, y, rows, n, width, width, LOG_C=log_c, **flags, **_NO_FMA)
        return y
    outer = x.shape[:dim].numel()

    def grid(meta):
        blocks = triton.cdiv(inner, meta["BLOCK_I"])
        if blocks > _MAX_GRID_1:
            raise ValueError(f"cumulative: {blocks} column blocks, over CUDA's grid limit")
        return (outer, blocks)

    _scan_cols[grid](x, m, y, inner, n, width * inner, width * inner, **flags, **_NO_FMA)
    return y


def cumsum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``torch.cumsum(x, dim)``, ATen's CUDA arithmetic. See :func:`cumulative`."""
    return cumulative(x, dim, "sum")


def cumprod(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``torch.cumprod(x, dim)``, ATen's CUDA arithmetic. See :func:`cumulative`."""
    return cumulative(x, dim, "prod")
