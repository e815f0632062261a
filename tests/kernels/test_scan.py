"""The scans (``kernels/triton/scan.py``) under Triton's interpreter: ``cumulative`` is
checked bit for bit against an emulation of ATen's CUDA scan order written here in plain
torch (:func:`aten_scan`), for the four float dtypes, sums and products, the last-dim path
(chunks, a carry, Sklansky steps) and the other-dim path (a left-to-right walk), and the
folded forms (a multiplier, reversed, exclusive). Where ATen runs another kernel (CUB's
scan of one row) the result is PyTorch's own call's. The GPU test checks bit-equality with
PyTorch's CUDA kernels themselves."""

from __future__ import annotations

import pytest
import torch
import triton

from solforge.kernels.triton import scan
from solforge.kernels.triton.scan import cumprod, cumsum, cumulative, log_nx

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
# the kernels run on CPU tensors under Triton's interpreter only (conftest sets it where
# there is no GPU); elsewhere PyTorch's CPU call runs, whose order is not ATen's CUDA one
interpreted = pytest.mark.skipif(not scan.INTERPRET, reason="needs TRITON_INTERPRET=1")
_U32 = 2 ** 32


def aten_log_nx(num_rows: int, row_size: int, unsigned: bool = True) -> int:
    """ATen's ``get_log_num_threads_x_inner_scan``, its loops as written, in ``uint32_t``
    (how ``scan_innermost_dim`` instantiates it); ``unsigned=False`` is the same in
    signed 64-bit arithmetic (C++ division truncates toward zero), the order a kernel
    would follow had it missed the wrap-around."""
    lx = ly = 0
    while (1 << lx) < row_size:
        lx += 1
    while (1 << ly) < num_rows:
        ly += 1
    if unsigned:
        t = ((9 + ((lx - ly) % _U32)) % _U32) // 2
    else:
        t = int((9 + lx - ly) / 2)
    return min(max(4, t), 9)


def aten_scan(x: torch.Tensor, dim: int, op: str = "sum", *, unsigned: bool = True
              ) -> torch.Tensor:
    """ATen's CUDA scan (``ScanUtils.cuh``'s ``scan_dim``) emulated on the CPU, one
    combine at a time, each rounded to ``x``'s dtype for fp16/bf16 (c10's arithmetic is
    fp32 rounded back), fp32 and fp64 in their own precision.

    - ``dim`` is the last dim: every row is cut into chunks of ``2 * nx`` elements
      (``nx = 2 ** aten_log_nx(rows, n)``), a chunk's padding is the identity; the running
      total of the earlier chunks is combined into the chunk's first element; then
      ``log_nx + 1`` Sklansky steps: at step ``m`` each element of the upper half of every
      ``2 ** (m + 1)`` block becomes ``itself op (the lower half's last element)``; the
      chunk's last element is the next running total.
    - another dim: ``acc = acc op x[i]`` left to right from the identity.

    Not the one-row case (CUB's scan): callers give it tensors of more than one row."""
    dt = x.dtype
    acc = torch.float64 if dt == torch.float64 else torch.float32
    half = dt in (torch.float16, torch.bfloat16)

    def f(a, b):
        v = a * b if op == "prod" else a + b
        return v.to(dt).to(acc) if half else v

    init = 1.0 if op == "prod" else 0.0
    x = x.contiguous().to(acc)
    d = dim % x.dim()
    if d != x.dim() - 1:
        xm = x.movedim(d, 0)
        out = torch.empty_like(xm)
        a = torch.full_like(xm[0], init)
        for i in range(xm.shape[0]):
            a = f(a, xm[i])
            out[i] = a
        return out.movedim(0, d).to(dt)
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    r = rows.shape[0]
    c = 2 ** (aten_log_nx(r, n, unsigned) + 1)
    out = torch.empty_like(rows)
    carry = torch.full((r,), init, dtype=acc)
    for k in range(0, n, c):
        w = min(c, n - k)
        buf = torch.full((r, c), init, dtype=acc)
        buf[:, :w] = rows[:, k:k + w]
        buf[:, 0] = f(buf[:, 0], carry)
        s = 1
        while s < c:
            blocks = buf.view(r, c // (2 * s), 2, s)  # [block, lower|upper half, s]
            blocks[:, :, 1, :] = f(blocks[:, :, 1, :], blocks[:, :, 0, s - 1:s])
            s *= 2
        out[:, k:k + w] = buf[:, :w]
        carry = buf[:, c - 1].clone()
    return out.reshape(x.shape).to(dt)


def _exclusive_ref(x, dim, op="sum"):
    """The exclusive form as eager spells it: a zero, then the scan of the narrowed copy."""
    body = aten_scan(x.narrow(dim, 0, x.shape[dim] - 1), dim, op)
    return torch.cat((torch.zeros_like(x.narrow(dim, 0, 1)), body), dim)


def _data(shape, dt, op, seed=0):
    """Signed inputs; for products, magnitudes near 1 so long rows neither vanish nor
    overflow (and every product keeps rounding)."""
    g = torch.Generator().manual_seed(seed)
    if op == "prod":
        sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
        x = (0.9 + 0.2 * torch.rand(shape, generator=g)) * sign
    else:
        x = torch.rand(shape, generator=g) * 2 - 1
    return x.to(dt)


@pytest.fixture
def wide_tiles(monkeypatch):
    """Tiles of 512 rows / 256 columns instead of the interpreter's 2 / 4 (its programs
    cost milliseconds each): for the many-row shapes. A program's tile only chooses which
    rows it takes, not any row's arithmetic; the last tile is partial here."""
    monkeypatch.setattr(scan._scan_rows, "configs", [triton.Config({"BLOCK_R": 512})])
    monkeypatch.setattr(scan._scan_cols, "configs", [triton.Config({"BLOCK_I": 256})])


def test_log_nx_is_aten_s_in_unsigned_arithmetic():
    # (rows, row length) -> log2 of the threads along a row (half a chunk)
    known = {(1, 32768): 9, (2, 3000): 9, (4, 100): 7, (64, 256): 5, (64, 65): 5,
             (64, 64): 4, (32768, 32768): 4, (3000, 20): 4, (2, 1): 4,
             (1024, 2): 4,  # 9 + (1 - 10) = 0: no wrap yet
             (2048, 2): 9,  # 9 + (1 - 11) < 0 wraps around in uint32: 9, not 4
             (4096, 2): 9, (32769, 40): 9}
    assert {k: log_nx(*k) for k in known} == known
    # the wrap-around is what separates those from signed arithmetic
    assert aten_log_nx(2048, 2, unsigned=False) == 4 == aten_log_nx(32769, 40, False)
    pairs = [(r, n) for r in (1, 2, 3, 5, 64, 100, 513, 1025, 4097, 70000, 2 ** 20 + 1)
             for n in (1, 2, 3, 16, 17, 33, 100, 1000, 4097, 32768)]
    assert [log_nx(r, n) for r, n in pairs] == [aten_log_nx(r, n) for r, n in pairs]


def test_the_emulation_is_not_pytorch_s_cpu_order():
    """The emulated order differs from the CPU's sequential sums (and the chunk size
    matters), so bit-equality with it says something about the kernel's order."""
    x = _data((16, 1000), torch.float32, "sum")
    assert not torch.equal(aten_scan(x, 1), torch.cumsum(x, 1))
    x = _data((32769, 40), torch.float32, "sum")
    assert not torch.equal(aten_scan(x, 1), aten_scan(x, 1, unsigned=False))


@interpreted
@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("dt", FLOATS)
def test_last_dim_is_aten_s_order_bit_for_bit(dt, op):
    # one chunk (2, 70), several chunks with a carry (48, 100: chunks of 64;
    # 16, 1000: of 256; 2, 3000: of 1024, the largest), a 3-d tensor
    for shape in [(5, 70), (48, 100), (16, 1000), (2, 3000), (3, 4, 37)]:
        x = _data(shape, dt, op)
        y = cumulative(x, -1, op)
        assert y.dtype == dt and y.shape == x.shape
        assert torch.equal(y, aten_scan(x, -1, op)), (shape, dt, op)


@interpreted
@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("dt", FLOATS)
def test_another_dim_walks_left_to_right_bit_for_bit(dt, op):
    for shape, dim in [((6, 33), 0), ((3, 40, 5), 1), ((2, 3, 17, 4), 2), ((7, 9, 1), 1)]:
        x = _data(shape, dt, op)
        assert torch.equal(cumulative(x, dim, op), aten_scan(x, dim, op)), (shape, dim)


@interpreted
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_short_rows_many_rows_take_the_capped_chunk(wide_tiles, dt):
    """Many short rows: ``log_nx`` is clamped (3000 x 20: 4) or wraps around to 9
    (4096 x 2)."""
    for shape in [(4096, 2), (3000, 20)]:
        x = _data(shape, dt, "sum")
        assert torch.equal(cumulative(x, 1), aten_scan(x, 1)), shape


@interpreted
def test_the_wrapped_around_chunk_spans_the_whole_row(wide_tiles):
    """32769 rows of 40: uint32 arithmetic gives chunks of 1024 (one per row), signed
    arithmetic would give chunks of 32 (two per row, a carry between): the two orders
    differ (test above), and the kernel's is the unsigned one."""
    x = _data((32769, 40), torch.float32, "sum")
    assert torch.equal(cumulative(x, 1), aten_scan(x, 1))


@interpreted
@pytest.mark.parametrize("dt", FLOATS)
def test_the_multiplier_is_read_in_the_same_pass(dt):
    """``cumsum(x * m)``: a bool mask or a same-dtype multiplier; the product rounds to
    the dtype before the scan adds it, as eager's separate product does."""
    for shape, dim in [((16, 300), 1), ((5, 24, 3), 1)]:
        x = _data(shape, dt, "sum")
        mask = torch.rand(shape) < 0.5
        mult = _data(shape, dt, "sum", seed=1)
        for m in (mask, mult):
            want = aten_scan(x * m, dim)
            assert torch.equal(cumulative(x, dim, multiplier=m), want), (shape, m.dtype)
    # cumprod of a product
    x, m = _data((6, 50), dt, "prod"), _data((6, 50), dt, "prod", seed=1)
    assert torch.equal(cumulative(x, 1, "prod", multiplier=m), aten_scan(x * m, 1, "prod"))


@interpreted
def test_a_multiplier_that_broadcasts_or_promotes_is_multiplied_first():
    x = _data((8, 100), torch.float16, "sum")
    w = _data((100,), torch.float16, "sum", seed=1)
    assert torch.equal(cumulative(x, 1, multiplier=w), aten_scan(x * w, 1))
    w32 = _data((8, 100), torch.float32, "sum", seed=1)  # fp16 * fp32: an fp32 scan
    y = cumulative(x, 1, multiplier=w32)
    assert y.dtype == torch.float32 and torch.equal(y, aten_scan(x * w32, 1))


@interpreted
@pytest.mark.parametrize("dt", [torch.float32, torch.float16])
def test_reverse_is_the_scan_of_the_flipped_tensor_flipped_back(dt):
    for shape, dim in [((16, 300), 1), ((5, 24, 3), 1), ((9, 4), 0)]:
        x = _data(shape, dt, "sum")
        want = aten_scan(x.flip(dim), dim).flip(dim)
        assert torch.equal(cumulative(x, dim, reverse=True), want), (shape, dim)
        assert not torch.equal(want, aten_scan(x, dim))  # the direction shows
    x, m = _data((6, 50), dt, "sum"), torch.rand(6, 50) < 0.5
    assert torch.equal(cumulative(x, 1, multiplier=m, reverse=True),
                       aten_scan((x * m).flip(1), 1).flip(1))
    x = _data((6, 50), dt, "prod")
    assert torch.equal(cumulative(x, 1, "prod", reverse=True),
                       aten_scan(x.flip(1), 1, "prod").flip(1))


@interpreted
@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_exclusive_is_a_zero_then_the_scan_of_all_but_the_last(dt):
    # 64 x 65 takes chunks of 64 for the 64 scanned elements (log_nx(64, 64) = 4), not
    # the 128 that the full width would give (log_nx(64, 65) = 5)
    x = _data((64, 65), dt, "sum")
    y = cumulative(x, 1, exclusive=True)
    assert y.shape == x.shape and torch.equal(y, _exclusive_ref(x, 1))
    assert not torch.equal(y[:, 1:], aten_scan(x, 1)[:, :-1])  # not the full row's chunk
    for shape, dim in [((16, 300), 1), ((3, 40, 5), 1), ((9, 4), 0)]:
        x = _data(shape, dt, "sum")
        y = cumulative(x, dim, exclusive=True)
        assert torch.equal(y, _exclusive_ref(x, dim)), (shape, dim)
        assert (y.narrow(dim, 0, 1) == 0).all()
    x, m = _data((6, 50), dt, "prod"), torch.rand(6, 50) < 0.5
    assert torch.equal(cumulative(x, 1, "prod", multiplier=m, exclusive=True),
                       _exclusive_ref(x * m, 1, "prod"))
    # one element along dim: only the zero
    assert torch.equal(cumulative(x[:, :1], 1, exclusive=True), torch.zeros(6, 1, dtype=dt))


@interpreted
def test_non_contiguous_inputs():
    x = _data((300, 16), torch.float32, "sum").t()  # (16, 300), column-major
    assert not x.is_contiguous()
    assert torch.equal(cumulative(x, 1), aten_scan(x, 1))
    assert torch.equal(cumulative(x, 0), aten_scan(x, 0))
    x = _data((8, 200), torch.float16, "sum")[:, ::2]  # strided
    m = (torch.rand(100, 8) < 0.5).t()
    assert torch.equal(cumulative(x, 1, multiplier=m), aten_scan(x * m, 1))
    assert torch.equal(cumulative(x, 1, exclusive=True), _exclusive_ref(x, 1))


@interpreted
def test_cumsum_and_cumprod_are_cumulative():
    x = _data((5, 70), torch.float32, "prod")
    assert torch.equal(cumsum(x, 1), aten_scan(x, 1))
    assert torch.equal(cumprod(x, 0), aten_scan(x, 0, "prod"))


def test_one_row_is_pytorch_s_own_call():
    """ATen scans one row (numel == size(dim)) with CUB: PyTorch's call runs (on this CPU,
    the CPU's result, which the emulated order does not give)."""
    x = _data((300,), torch.float32, "sum")
    assert not torch.equal(aten_scan(x.reshape(1, 300), 1).reshape(300), torch.cumsum(x, 0))
    assert torch.equal(cumulative(x, 0), torch.cumsum(x, 0))
    assert torch.equal(cumulative(x.reshape(1, 300), 1), torch.cumsum(x.reshape(1, 300), 1))
    assert torch.equal(cumulative(x.reshape(1, 300, 1), -2),
                       torch.cumsum(x.reshape(1, 300, 1), -2))
    assert torch.equal(cumulative(x, 0, "prod"), torch.cumprod(x, 0))
    m = torch.rand(300) < 0.5
    assert torch.equal(cumulative(x, 0, multiplier=m), torch.cumsum(x * m, 0))
    assert torch.equal(cumulative(x, 0, reverse=True), torch.cumsum(x.flip(0), 0).flip(0))
    # exclusive: the narrowed copy (299 long) is the one row
    want = torch.cat((torch.zeros(1), torch.cumsum(x[:-1], 0)))
    assert not torch.equal(want[1:], aten_scan(x[:-1].reshape(1, 299), 1).reshape(299))
    assert torch.equal(cumulative(x, 0, exclusive=True), want)
    assert torch.equal(cumulative(x.reshape(1, 300), 1, exclusive=True), want[None])


def test_empty_tensors():
    for shape, dim in [((4, 0), 1), ((0, 5), 1), ((0, 5), 0)]:
        x = torch.rand(shape)
        assert torch.equal(cumulative(x, dim), torch.cumsum(x, dim))
    y = cumulative(torch.rand(0, 5), 1, exclusive=True)
    assert y.shape == (0, 5)
    with pytest.raises(ValueError, match="empty dim"):
        cumulative(torch.rand(4, 0), 1, exclusive=True)


def test_few_long_rows_get_a_program_a_row_many_rows_keep_wide_tiles(monkeypatch):
    """The autotuner's choices for the last-dim path on a 132-SM device: 8 rows of a
    128k vocabulary (a top-p filter) must not share one program, as they would in the
    16-row tiles KernelBench's 32,768 rows were tuned to."""
    monkeypatch.setattr(scan, "sm_count", lambda device: 132)
    configs = [triton.Config({"BLOCK_R": r}) for r in (1, 2, 4, 8, 16, 32, 64, 128)]
    x = torch.empty(1)

    def kept(rows):
        return [c.kwargs["BLOCK_R"] for c in scan._enough_programs(configs, {"ROWS": rows,
                                                                           "x_ptr": x})]
    assert kept(8) == kept(100) == [1]
    assert kept(1000) == [1, 2]
    assert kept(32768) == [16, 32, 64]  # 128 would leave under two programs an SM
    # never empty: the smallest tile when none leaves enough programs
    assert [c.kwargs["BLOCK_R"] for c in scan._enough_programs(
        configs[4:], {"ROWS": 8, "x_ptr": x})] == [16]


def test_what_it_does_not_take_is_a_clear_error():
    x = torch.rand(4, 5)
    with pytest.raises(ValueError, match="op 'max'"):
        cumulative(x, 1, "max")
    for dt in (torch.int32, torch.int64, torch.bool, torch.complex64):
        with pytest.raises(ValueError, match="dtype"):
            cumulative(torch.ones(4, 5, dtype=dt), 1)
    for dim in (2, -3):
        with pytest.raises(ValueError, match="out of range"):
            cumulative(x, dim)
    with pytest.raises(ValueError, match="exclusive and reverse"):
        cumulative(x, 1, exclusive=True, reverse=True)
    with pytest.raises(ValueError, match="0-d"):
        cumulative(torch.tensor(1.0), 0)
    with pytest.raises(ValueError, match="product's dtype"):
        cumulative(x, 1, multiplier=torch.ones(4, 5, dtype=torch.complex64))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dt", FLOATS)
def test_gpu_outputs_are_pytorch_s_bit_for_bit(dt):
    """On a GPU, PyTorch's own scans and the eager composites: equal outputs, to the bit,
    signed inputs, sums and products; last-dim rows of one and several chunks, many short
    rows (the clamp and the wrap-around of log_nx), other dims, one row (CUB: PyTorch's
    call) and the folded forms."""
    cases = [((64, 4096), 1), ((16, 30000), -1), ((48, 100), 1), ((4096, 2), 1),
             ((3000, 20), 1), ((32769, 40), 1), ((2, 3000), 1), ((64, 65), 1),
             ((3, 40, 5), 1), ((257, 1000), 0), ((1, 5000), 1), ((300,), 0)]
    for shape, dim in cases:
        for op, ref in (("sum", torch.cumsum), ("prod", torch.cumprod)):
            x = _data(shape, dt, op).cuda()
            assert torch.equal(cumulative(x, dim, op), ref(x, dim)), (shape, dim, op)
            assert torch.equal(cumulative(x, dim, op, reverse=True),
                               ref(x.flip(dim), dim).flip(dim)), (shape, dim, op)
            body = ref(x.narrow(dim, 0, x.shape[dim] - 1), dim)
            want = torch.cat((torch.zeros_like(x.select(dim, 0).unsqueeze(dim)), body), dim)
            assert torch.equal(cumulative(x, dim, op, exclusive=True), want), (shape, dim, op)
        x = _data(shape, dt, "sum").cuda()
        mask = torch.rand(shape, device="cuda") < 0.5
        mult = _data(shape, dt, "sum", seed=1).cuda()
        for m in (mask, mult):
            assert torch.equal(cumulative(x, dim, multiplier=m), torch.cumsum(x * m, dim)), \
                (shape, dim, m.dtype)
