"""solforge.kernels.triton against PyTorch references, on ragged shapes, under the interpreter.

The references are the eager code each kernel reproduces (HF transformers, vLLM, DeepSeek).
Tolerances are one step of the output dtype (fp32 math that differs from PyTorch's in the
last bit can flip a rounding); FP8 and int8 outputs must match exactly.
"""

import functools
import math
import os

os.environ["TRITON_INTERPRET"] = "1"  # read by the kernels when they are imported, below

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")  # an optional dependency: solforge[triton]

import solforge.kernels.triton as K  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from solforge.kernels.triton import row_softmax  # noqa: E402
from solforge.kernels.triton.router import _as_fp32  # noqa: E402

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
FP8 = torch.float8_e4m3fn
TOL = {BF16: 8e-3, FP16: 1e-3, FP32: 1e-5}
ROWS = [(1, 257), (13, 509), (2, 3, 131)]  # a single row, prime dims, 3-D leading shape


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def close(out, ref, dtype=None):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    tol = TOL[dtype or ref.dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


def rms_ref(x, w, eps, offset):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if offset:
        return (h * (1.0 + w.float())).to(x.dtype)
    return w * h.to(x.dtype)


@pytest.mark.parametrize("shape", ROWS)
@pytest.mark.parametrize("dtype", [BF16, FP32])
@pytest.mark.parametrize("offset", [False, True])
def test_rms_norm(shape, dtype, offset):
    x = torch.randn(shape, dtype=dtype) * 3
    w = (0.1 * torch.randn(shape[-1])).to(dtype) + (0 if offset else 1)
    close(K.rms_norm(x, w, 1e-6, offset_weight=offset), rms_ref(x, w, 1e-6, offset))


def test_rms_norm_fp32_weight_promotes():
    x, w = torch.randn(5, 257, dtype=BF16), 1 + 0.1 * torch.randn(257)
    close(K.rms_norm(x, w, 1e-5), rms_ref(x, w, 1e-5, False), dtype=BF16)


@pytest.mark.parametrize("shape", ROWS)
def test_add_rms_norm(shape):
    x, res = torch.randn(shape, dtype=BF16), 4 * torch.randn(shape, dtype=BF16)
    w = (1 + 0.1 * torch.randn(shape[-1])).to(BF16)
    x0, res0 = x.clone(), res.clone()
    y, new_res = K.add_rms_norm(x, res, w, 1e-5)
    close(new_res, res + x)
    close(y, rms_ref(res + x, w, 1e-5, False))
    assert torch.equal(x, x0) and torch.equal(res, res0)


@pytest.mark.parametrize("shape", ROWS)
@pytest.mark.parametrize("dtype", [FP16, FP32])
def test_layer_norm(shape, dtype):
    n = shape[-1]
    x = (torch.randn(shape) * 2 + 0.5).to(dtype)
    w, b = (1 + 0.1 * torch.randn(n)).to(dtype), (0.1 * torch.randn(n)).to(dtype)
    close(K.layer_norm(x, w, b, 1e-6), F.layer_norm(x.float(), (n,), w.float(), b.float(),
                                                  1e-6).to(dtype))
    close(K.layer_norm(x, eps=1e-6), F.layer_norm(x.float(), (n,), eps=1e-6).to(dtype))


def test_layer_norm_strided_rows():
    x = torch.randn(7, 600)[:, :509]  # rows 600 apart
    close(K.layer_norm(x, eps=1e-5), F.layer_norm(x, (509,), eps=1e-5))


@pytest.mark.parametrize("n", [1, 61, 257, 1031])  # 1031 > the interpreter's tile: two passes
def test_softmax(n):
    s = 3 * torch.randn(2, 3, n)
    close(K.softmax(s), s.softmax(-1))
    scores = s.to(BF16).masked_fill(torch.rand(2, 3, n) < 0.3, torch.finfo(BF16).min)
    close(K.softmax(scores), scores.softmax(-1, dtype=FP32).to(BF16))
    close(K.softmax(scores, out_dtype=FP32), scores.softmax(-1, dtype=FP32))


def test_softmax_rows_split_over_programs_and_not():
    from solforge.kernels.triton._common import row_splits

    # few long rows: split (a piece of only -inf logits adds nothing); many: one program each
    # (rows too long for the cooperative grid of the interpreter's 4 fake SMs)
    assert row_splits(2, 1031, torch.device("cpu"), 128)[0] > 1
    assert row_splits(16, 1031, torch.device("cpu"), 128)[0] == 1
    assert row_softmax.plan_rows(16, 1031, 4).kind == "rows"
    s = 3 * torch.randn(2, 1031)
    s[0, :600] = float("-inf")  # the first pieces of row 0 are all -inf
    close(K.softmax(s), s.softmax(-1))
    s = 3 * torch.randn(16, 1031)
    close(K.softmax(s), s.softmax(-1))
    assert torch.isnan(K.softmax(torch.full((1, 1031), float("-inf")))).all()  # as PyTorch


# one tile, split, one program a row (too long for the cooperative cut here)
@pytest.mark.parametrize("shape", [(3, 61), (2, 1031), (16, 1031)])
def test_log_softmax(shape):
    s = 4 * torch.randn(*shape)
    close(K.log_softmax(s), s.log_softmax(-1))
    close(K.log_softmax(s.to(BF16), out_dtype=FP32), s.to(BF16).log_softmax(-1, dtype=FP32))
    s[0, : shape[1] // 2] = float("-inf")  # masked logits: -inf out, the rest renormalised
    close(K.log_softmax(s), s.log_softmax(-1))
    assert torch.isnan(K.log_softmax(torch.full(shape, float("-inf")))).all()  # as PyTorch


def test_plan_rows_takes_the_one_read_path_for_many_long_rows():
    # the GPU's figures (the interpreter's tiles are smaller): one tile up to 8192, pieces
    # of 16384, two programs a SM
    plan = functools.partial(row_softmax.plan_rows, chunk=16384, max_tile=8192, per_sm=2)
    # KernelBench's 23_Softmax on 132 SMs: 24 pieces, 11 rows at a time (all 264 slots)
    assert plan(4096, 393216, 132, interpret=False) == ("coop", 24, 11)
    assert plan(4096, 393216, 132, interpret=True) == ("pieces", 24, 11)  # never spin there
    assert plan(512, 393216, 132, interpret=False).kind == "coop"
    assert plan(96, 100003, 132, interpret=False) == ("coop", 7, 37)  # a partial last piece
    assert plan(4096, 8192, 132, interpret=False).kind == "tile"  # already read once
    assert plan(4096, 16384, 132, interpret=False).kind == "rows"  # one piece: two passes
    assert plan(4096, 16385, 132, interpret=False) == ("coop", 2, 132)
    # too few rows to fill the slots: split rows, two launches
    assert plan(8, 131072, 132, interpret=False).kind == "rows"
    # a row of more pieces than slots; one of fewer on one lane
    assert plan(4096, 300 * 16384, 132, interpret=False).kind == "rows"
    assert plan(4096, 200 * 16384, 132, interpret=False) == ("coop", 200, 1)
    # the module's own defaults here: the interpreter's tiles, never the spin-wait
    assert row_softmax.plan_rows(20, 300, row_softmax.sm_count("cpu")) == ("pieces", 3, 2)


def _long_rows(shape, dtype):
    """Rows with -inf entries, a first piece all -inf, and a last row all -inf."""
    s = 3 * torch.randn(shape)
    s[..., 0, :130] = float("-inf")  # more than a piece
    s[..., 1, ::7] = float("-inf")
    s[..., -1, :] = float("-inf")
    return s.to(dtype)


def close_but_last_row(out, ref, dtype=None):
    """``close`` on all rows but the last, which is all -inf in and NaN out, as PyTorch's."""
    assert torch.isnan(out[..., -1, :]).all() and torch.isnan(ref[..., -1, :]).all()
    close(out[..., :-1, :], ref[..., :-1, :], dtype)


# a partial last piece (3 pieces, 2 rows at a time), pieces that end with the row, one lane
@pytest.mark.parametrize("shape, dtype", [((6, 300), FP32), ((6, 300), BF16),
                                          ((5, 256), FP16), ((2, 2, 600), FP32)])
def test_softmax_long_rows_in_pieces(shape, dtype):
    rows, n = math.prod(shape[:-1]), shape[-1]
    assert row_softmax.plan_rows(rows, n, row_softmax.sm_count("cpu")).kind == "pieces"
    s = _long_rows(shape, dtype)
    for ours, ref in ((K.softmax, torch.softmax), (K.log_softmax, torch.log_softmax)):
        close_but_last_row(ours(s), ref(s, -1, dtype=FP32).to(dtype), dtype)
        if dtype != FP32:
            close_but_last_row(ours(s, out_dtype=FP32), ref(s, -1, dtype=FP32), dtype)
        else:  # the two-pass path, kept for comparison, agrees
            close_but_last_row(ours(s, cooperative=False), ref(s, -1), dtype)


@pytest.mark.parametrize("log, prefetch", [(False, False), (True, False), (False, True)])
def test_cooperative_kernel_under_the_interpreter(log, prefetch, monkeypatch):
    """The one-launch kernel, run here one program after another: each row's last piece
    finds the others arrived and combines their partials; every other piece gives up
    waiting (after 2 polls) and reads the whole row itself."""
    monkeypatch.setattr(row_softmax, "_COOP_PREFETCH", prefetch)
    s = _long_rows((9, 300), FP32)
    plan = row_softmax.plan_rows(9, 300, 4, interpret=False)
    assert plan == ("coop", 3, 2)
    y = torch.empty_like(s)
    cnt = row_softmax._cooperative(s, y, plan, log, max_spins=2)
    close_but_last_row(y, s.log_softmax(-1) if log else s.softmax(-1))
    assert cnt[:-1].tolist() == [3] * 9 and cnt[-1] == 1  # all arrived; some gave up


@pytest.mark.parametrize("shape", [(1, 1031), (5, 509), (2, 3, 300), (20, 300), (1, 1)])
@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_argmax(shape, dtype):
    x = (3 * torch.randn(shape)).to(dtype)
    out = K.argmax(x)
    assert out.dtype == torch.int64 and torch.equal(out, x.argmax(-1))


@pytest.mark.parametrize("shape,dim,mean,dtype", [
    ((4, 8, 300), 1, False, BF16), ((3, 2, 5, 70), 1, False, FP32),
    ((3, 2, 5, 70), -3, True, FP16), ((5, 3, 7), 0, False, FP32), ((6, 1, 9), 1, True, BF16)])
def test_sum_dim(shape, dim, mean, dtype):
    x = torch.randn(shape).to(dtype)
    out = K.sum_dim(x, dim, mean=mean)
    close(out, x.mean(dim) if mean else x.sum(dim))
    kept = K.sum_dim(x, dim, mean=mean, keepdim=True)
    close(kept, x.mean(dim, keepdim=True) if mean else x.sum(dim, keepdim=True))


def test_sum_dim_reads_strided_views_and_empty_dims_as_torch():
    x = torch.randn(2, 9, 130)[:, 1:]  # a ViT's tokens after the class token: no copy
    close(K.sum_dim(x, 1, mean=True), x.mean(1))
    xt = torch.randn(4, 6, 10).transpose(0, 1)  # strides that do not collapse: copied
    close(K.sum_dim(xt, 1), xt.sum(1))
    empty = torch.randn(3, 0, 5)
    assert torch.equal(K.sum_dim(empty, 1), empty.sum(1))
    assert K.sum_dim(empty, 1, mean=True).isnan().all() and empty.mean(1).isnan().all()
    with pytest.raises(ValueError, match="a dim other than the last"):
        K.sum_dim(x, -1)


def test_sum_dim_s_error_does_not_grow_with_k():
    """A deep fp32 sum (4096 signed values a column, KernelBench 47's depth) lands within
    an ulp or two of the exact sum: compensated, where one running sum lands ~1e-4 off
    (benchmarks/sum_order.py), as far as PyTorch's own order may be from the exact sum."""
    torch.manual_seed(3)
    x = torch.randn(1, 4096, 48)
    exact = x.double().sum(1)
    err = (K.sum_dim(x, 1).double() - exact).abs().max().item()
    plain = torch.zeros(48)
    for row in x[0]:  # one fp32 running sum in K order: the order the kernel walks
        plain += row
    assert (plain.double() - exact).abs().max().item() > 1e-5  # this seed: ~1e-4 off
    assert err <= 1e-5
    # infinities and NaN as PyTorch's sum has them (the compensation must not turn an
    # inf NaN): +inf; +inf and -inf: NaN; a NaN: NaN; past fp32's range: inf
    y = torch.randn(2, 40, 5)
    y[0, 3, 0] = float("inf")
    y[0, 7, 1], y[0, 9, 1] = float("inf"), float("-inf")
    y[1, 5, 2] = float("nan")
    y[1, :, 3] = 3e37
    ref = y.sum(1)
    out = K.sum_dim(y, 1)
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf(), ref.isinf())
    close(out.nan_to_num(posinf=0.0), ref.nan_to_num(posinf=0.0))


def same_values(out, ref):
    """Bit for bit but NaN's payload: the same NaNs, values and signs of zeros."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    nan = ref.isnan()
    assert torch.equal(out.isnan(), nan)
    assert torch.equal(out[~nan], ref[~nan])
    assert torch.equal(out[~nan].signbit(), ref[~nan].signbit())


@pytest.mark.parametrize("shape,dim,dtype", [
    ((4, 37, 70), 1, FP32), ((3, 2, 5, 70), -3, BF16), ((5, 3, 7), 0, FP16),
    ((2, 6, 1), 1, FP32), ((3, 9, 2, 5), 2, BF16)])
def test_max_min_dim(shape, dim, dtype):
    x = torch.randn(shape).to(dtype)
    for keepdim in (False, True):
        same_values(K.max_dim(x, dim, keepdim), torch.max(x, dim, keepdim).values)
        same_values(K.min_dim(x, dim, keepdim), torch.min(x, dim, keepdim).values)
        assert torch.equal(K.max_dim(x, dim, keepdim), torch.amax(x, dim, keepdim))


def test_max_min_dim_nans_infinities_and_zeros_as_torch():
    nan, inf = float("nan"), float("inf")
    x = torch.randn(3, 11, 7)
    x[0, 0, 0] = nan             # NaN first, in the middle, in the masked last step
    x[0, 4, 1] = nan
    x[0, 10, 2] = x[0, 3, 2] = nan
    x[1, :, 0] = -inf            # all -inf, all +inf, both
    x[1, :, 1] = inf
    x[1, :, 2] = -inf
    x[1, 6, 2] = inf
    x[2, :, 0] = -0.0            # zeros of both signs: the first stays
    x[2, 5, 0] = 0.0
    x[2, :, 1] = 0.0
    x[2, 1, 1] = -0.0
    x[2, :, 2] = nan             # all NaN
    for dtype in (FP32, BF16, FP16):
        y = x.to(dtype)
        same_values(K.max_dim(y, 1), torch.max(y, 1).values)
        same_values(K.min_dim(y, 1), torch.min(y, 1).values)
        ref = torch.amin(y, 1, keepdim=True)  # equal as numbers; NaN where amin has it
        assert torch.equal(K.min_dim(y, 1, keepdim=True).isnan(), ref.isnan())


def test_max_min_dim_views_empty_shapes_and_bad_input_as_torch():
    x = torch.randn(2, 9, 130)[:, 1:]  # no copy
    same_values(K.max_dim(x, 1), x.max(1).values)
    xt = torch.randn(4, 6, 10).transpose(0, 1)  # copied
    same_values(K.min_dim(xt, 1), xt.min(1).values)
    assert K.max_dim(torch.randn(0, 4, 3), 1).shape == (0, 3)
    with pytest.raises(IndexError, match="non-zero size"):
        K.max_dim(torch.randn(3, 0, 5), 1)
    with pytest.raises(IndexError, match="non-zero size"):
        K.min_dim(torch.randn(0, 0, 5), 1, keepdim=True)
    for dim in (2, 3, -4):  # the last, and past the rank either way
        with pytest.raises(ValueError, match="a dim other than the last"):
            K.max_dim(x, dim)
    with pytest.raises(ValueError, match="floating-point"):
        K.min_dim(torch.ones(3, 4, 5, dtype=torch.int32), 1)


@pytest.mark.parametrize("tokens,experts,k,renorm,out", [
    (17, 8, 2, True, BF16), (1, 16, 4, True, BF16), (131, 8, 2, False, FP32),
    (5, 60, 6, True, FP32), (3, 4, 4, False, BF16)])
def test_softmax_topk(tokens, experts, k, renorm, out):
    x = 1.5 * torch.randn(tokens, experts)
    w, ids = K.softmax_topk(x, k, renormalize=renorm, out_dtype=out)
    ref_w, ref_ids = torch.topk(torch.softmax(x, dim=1, dtype=FP32), k, dim=-1)
    if renorm:
        ref_w = ref_w / ref_w.sum(dim=-1, keepdim=True)
    assert torch.equal(ids, ref_ids)
    close(w, ref_w.to(out))
    with pytest.raises(ValueError, match="needs 1 <= k <= experts"):
        K.softmax_topk(x, experts + 1)


def test_softmax_topk_keeps_subnormal_probabilities():
    # one logit 88-100 above the rest leaves them subnormal probabilities, distinct in
    # PyTorch; flushed to zero they would tie and the ids would come out in index order
    x = 1.5 * torch.randn(64, 16)
    x[:, 5] = torch.linspace(92.0, 100.0, 64)
    w, ids = K.softmax_topk(x, 4, out_dtype=FP32)
    ref_w, ref_ids = torch.topk(torch.softmax(x, dim=1, dtype=FP32), 4, dim=-1)
    assert (ref_w[:, 1:] > 0).all() and (ref_w[:, -1] < torch.finfo(FP32).tiny).all()
    assert torch.equal(ids, ref_ids)
    assert torch.equal(w[:, 0], ref_w[:, 0]) and (w[:, 1:] > 0).all()


@triton.jit
def _round_to_fp32(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(y_ptr + i, _as_fp32(tl.load(x_ptr + i, mask=i < n)), mask=i < n)


def test_the_routers_fp32_rounding_in_fp64_keeps_subnormals():
    # the interpreter's fp32 exp keeps subnormals, a GPU's flushes them: the kernel rounds
    # in fp64 itself, checked here against PyTorch's own fp64 -> fp32 cast
    tiny = torch.finfo(FP32).tiny
    v = torch.cat([torch.rand(200, dtype=torch.float64) * tiny * 2 ** -s for s in range(0, 26, 5)]
                  + [torch.tensor([0.0, 2.0 ** -149, 2.5 * 2.0 ** -149, 3.5 * 2.0 ** -149,
                                   tiny, 0.75, 1.0], dtype=torch.float64)])
    y = torch.empty_like(v)
    _round_to_fp32[(1,)](v, y, v.numel(), BLOCK=triton.next_power_of_2(v.numel()))
    assert torch.equal(y, v.float().double())
    # ties to even: 2.5 and 3.5 units of 2^-149 round to 2 and 4 units
    assert (y[:-7] > 0).sum() > 600 and y[-6:-3].tolist() == [2.0 ** -149, 2.0 ** -148,
                                                              2.0 ** -147]


def test_argmax_ties_infinities_and_nans_as_torch():
    x = torch.zeros(5, 1031)
    x[0, 700] = x[0, 900] = 1.0           # equal maxima in different pieces: the lower
    x[1] = float("-inf")                   # all -inf: index 0
    x[2, 300] = x[2, 800] = float("nan")   # the first NaN wins over everything
    x[3, 1000] = float("nan")
    x[3, 5] = float("inf")
    x[4] = torch.randint(0, 3, (1031,)).float()  # many ties
    assert torch.equal(K.argmax(x), x.argmax(-1))
    assert K.argmax(torch.randn(2, 3, 5, 509)).shape == (2, 3, 5)
    with pytest.raises(ValueError, match="non-empty"):
        K.argmax(torch.empty(3, 0))


@pytest.mark.parametrize("act,ref", [
    ("gelu", F.gelu), ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
    ("silu", F.silu), (None, lambda t: t)])
@pytest.mark.parametrize("dtype", [BF16, FP16, FP32])
def test_bias_act(act, ref, dtype):
    x = (2 * torch.randn(13, 509)).to(dtype)
    b = (0.1 * torch.randn(509)).to(dtype)
    close(K.bias_act(x, b, act), ref(x + b))
    close(K.bias_act(x[:1], None, act), ref(x[:1]))


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # exp(2z) -> inf, on purpose
def test_bias_act_saturates():
    x = torch.tensor([[-1e4, -30.0, 0.0, 30.0, 1e4]])
    for act, ref in (("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")), ("silu", F.silu)):
        close(K.bias_act(x, None, act), ref(x))


@pytest.mark.parametrize("shape", ROWS)
@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_glu(shape, dtype):
    g, u = (2 * torch.randn(shape)).to(dtype), torch.randn(shape).to(dtype)
    close(K.swiglu(g, u), F.silu(g) * u)
    close(K.geglu(g, u), F.gelu(g, approximate="tanh") * u)
    close(K.swiglu(torch.cat([g, u], dim=-1)), F.silu(g) * u)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def inv_freq(dim, theta=1e6):
    return 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim)


@pytest.mark.parametrize("dtype", [BF16, FP32])
def test_rope_hf_tables(dtype):
    b, hq, hk, s, d = 3, 7, 2, 5, 64
    q, k = torch.randn(b, hq, s, d, dtype=dtype), torch.randn(b, hk, s, d, dtype=dtype)
    pos = torch.randint(0, 40000, (b, s))
    cos, sin = K.rope_cos_sin(pos, inv_freq(d), dtype)
    freqs = pos[:, :, None].float() * inv_freq(d)
    emb = torch.cat((freqs, freqs), dim=-1)
    close(cos, emb.cos().to(dtype))
    close(sin, emb.sin().to(dtype))
    c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
    qo, ko = K.rotary_embedding(q, k, cos, sin)
    close(qo, q * c + rotate_half(q) * sn)
    close(ko, k * c + rotate_half(k) * sn)


def test_rope_transposed_views_with_bias():
    # Qwen: projections [b, s, h * d] with a bias, viewed as [b, h, s, d]
    b, s, hq, hk, d = 2, 3, 5, 1, 32
    q = torch.randn(b, s, hq * d, dtype=BF16)
    k = torch.randn(b, s, hk * d, dtype=BF16)
    qb, kb = torch.randn(hq * d, dtype=BF16), torch.randn(hk * d, dtype=BF16)
    cos, sin = K.rope_cos_sin(torch.arange(s).expand(b, s), inv_freq(d), BF16)
    heads = lambda t, h: t.view(b, s, h, d).transpose(1, 2)
    qo, ko = K.rotary_embedding(heads(q, hq), heads(k, hk), cos, sin, q_bias=qb, k_bias=kb)
    c, sn = cos.unsqueeze(1), sin.unsqueeze(1)
    qr, kr = heads(q + qb, hq), heads(k + kb, hk)
    close(qo, qr * c + rotate_half(qr) * sn)
    close(ko, kr * c + rotate_half(kr) * sn)


def test_rope_vllm_cache_positions():
    t, hq, hk, d, max_pos = 11, 3, 1, 64, 4096
    freqs = torch.arange(max_pos).float()[:, None] * inv_freq(d)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(BF16)  # half-width cos | sin
    pos = torch.randint(0, max_pos, (t,))
    q, k = torch.randn(t, hq * d, dtype=BF16), torch.randn(t, hk * d, dtype=BF16)
    heads = lambda x, h: x.view(1, t, h, d).transpose(1, 2)
    qo, ko = K.rotary_embedding(heads(q, hq), heads(k, hk), cache[:, :d // 2],
                                cache[:, d // 2:], pos.view(1, t))
    cos, sin = cache[pos].chunk(2, dim=-1)

    def ref(x, h):
        x1, x2 = x.view(t, h, d).chunk(2, dim=-1)
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    close(qo.transpose(1, 2).reshape(t, hq, d), ref(q, hq))
    close(ko.transpose(1, 2).reshape(t, hk, d), ref(k, hk))


def assert_fp8_equal(q, ref):
    assert q.dtype == FP8 and q.shape == ref.shape
    assert torch.equal(q.view(torch.uint8), ref.view(torch.uint8))


@pytest.mark.parametrize("shape", [(1, 257), (13, 509)])
def test_fp8_quant_per_tensor(shape):
    x = torch.randn(shape, dtype=BF16)
    q, s = K.fp8_quant_per_tensor(x)
    scale = x.abs().max().float() / 448.0
    assert_fp8_equal(q, (x.float() * (1.0 / scale)).clamp(-448, 448).to(FP8))
    assert torch.equal(s, scale.view(1))
    q2, s2 = K.fp8_quant_per_tensor(x, scale=torch.tensor([0.01]))
    assert_fp8_equal(q2, (x.float() * (1.0 / torch.tensor(0.01))).clamp(-448, 448).to(FP8))
    assert s2.item() == pytest.approx(0.01)


def test_fp8_rounding_covers_every_e4m3_value():
    # every representable value, every midpoint between neighbours (ties), and values
    # just beside them; the subnormal range and the clamp at 448 included
    grid = torch.arange(0, 127, dtype=torch.uint8).view(FP8).float()
    grid = torch.cat([grid, -grid])
    mids = (grid[1:127] + grid[:126]) / 2
    pts = torch.cat([grid, mids, mids.nextafter(torch.tensor(1e9)),
                     mids.nextafter(torch.tensor(-1e9)), torch.tensor([460.0, -500.0])])
    q, _ = K.fp8_quant_per_tensor(pts, scale=torch.tensor([1.0]))
    assert_fp8_equal(q, pts.clamp(-448, 448).to(FP8))


@pytest.mark.parametrize("shape", [(1, 384), (13, 640), (3, 200)])  # 200: a ragged last group
def test_fp8_quant_per_group(shape):
    x = torch.randn(shape, dtype=BF16)
    x[0, :128] = 0  # an all-zero group takes the eps scale
    q, s = K.fp8_quant_per_group(x, 128)
    m, n = shape
    g = -(-n // 128)
    padded = torch.zeros(m, g * 128)
    padded[:, :n] = x.float()
    amax = padded.view(m, g, 128).abs().amax(-1, keepdim=True).clamp(min=1e-10)
    sr = amax / 448.0
    ref = (padded.view(m, g, 128) / sr).clamp(-448, 448).to(FP8).view(m, -1)[:, :n]
    assert_fp8_equal(q, ref)
    assert torch.equal(s, sr.view(m, g))


@pytest.mark.parametrize("shape", [(257, 509), (131, 128), (1, 3)])
def test_fp8_quant_per_block_and_dequant(shape):
    w = 0.02 * torch.randn(shape, dtype=BF16)
    q, s = K.fp8_quant_per_block(w, 128)
    m, n = shape
    mb, nb = -(-m // 128), -(-n // 128)
    padded = torch.zeros(mb * 128, nb * 128, dtype=BF16)
    padded[:m, :n] = w
    view = padded.view(mb, 128, nb, 128)
    amax = view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    ref = (view * (448.0 / amax)).clamp(-448, 448).to(FP8).view_as(padded)[:m, :n]
    assert_fp8_equal(q, ref)
    assert torch.equal(s, (amax / 448.0).view(mb, nb))
    s_full = s.repeat_interleave(128, 0)[:m].repeat_interleave(128, 1)[:, :n]
    close(K.fp8_dequant(q, s), (q.float() * s_full).to(BF16))
    close(K.fp8_dequant(q, s, out_dtype=FP32), q.float() * s_full)


def test_fp8_dequant_per_group_and_tensor():
    x = torch.randn(5, 300, dtype=BF16)
    q, s = K.fp8_quant_per_group(x, 128)
    close(K.fp8_dequant(q, s, block=(1, 128)),
          (q.float() * s.repeat_interleave(128, 1)[:, :300]).to(BF16))
    qt, st = K.fp8_quant_per_tensor(x)
    close(K.fp8_dequant(qt, st, block=None), (qt.float() * st).to(BF16))


@pytest.mark.parametrize("shape", [(1, 257), (13, 509)])
def test_int8_quant_per_token(shape):
    x = torch.randn(shape, dtype=BF16)
    q, s = K.int8_quant_per_token(x)
    amax = x.abs().max(dim=-1)[0].float()
    ref = (x.float() * (127.0 / amax)[:, None]).round().clamp(-128, 127).to(torch.int8)
    assert torch.equal(q, ref)
    assert torch.equal(s, (amax / 127.0)[:, None])


def test_bad_arguments_say_what_to_fix():
    with pytest.raises(ValueError, match="weight has shape"):
        K.rms_norm(torch.randn(2, 8), torch.ones(4))
    with pytest.raises(ValueError, match="unknown activation"):
        K.bias_act(torch.randn(2, 8), None, "relu6")
    with pytest.raises(ValueError, match="trailing dims"):
        K.layer_norm(torch.randn(4, 5, 6), normalized_shape=(4, 5))
    with pytest.raises(ValueError, match="scales of shape"):
        K.fp8_dequant(torch.zeros(4, 4, dtype=FP8), torch.ones(2, 2))
