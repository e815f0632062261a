"""The normalisations by row statistics (``row_norm``: LayerNorm's long rows, GroupNorm,
InstanceNorm, a row over its mean |x| or L2 norm) against PyTorch, under the interpreter:
every path (one tile, the cooperative cut in two launches, the two launches over every row,
and the one-launch cooperative kernel run directly), the partial last piece, weights per
column and per channel, 16-bit dtypes, and the planner's choices at a GPU's figures.

The interpreter's pieces are 256 elements, so small shapes cut into several; its 4 fake
SMs hold 8 programs of the cooperative grid.
"""

import math
import os

os.environ["TRITON_INTERPRET"] = "1"  # read by the kernels when they are imported, below

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")  # an optional dependency: solforge[triton]

import solforge.kernels.triton as K  # noqa: E402
from solforge.kernels.triton import layernorm, row_norm  # noqa: E402
from solforge.kernels.triton.cooperative import RowPlan  # noqa: E402

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
TOL = {BF16: 8e-3, FP16: 1e-3, FP32: 1e-5}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def close(out, ref):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    tol = TOL[ref.dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


def test_plan_at_a_gpu_s_figures():
    """KernelBench's shapes on 132 SMs, pieces of 16384, two programs a SM."""
    def plan(rows, n, max_tile=None):
        return row_norm.plan(rows, n, 132, False, max_tile=max_tile, chunk=16384, per_sm=2)

    # 40_LayerNorm: 16 rows of 64 x 256 x 256 (LayerNorm keeps rows up to 65536 one-pass)
    assert plan(16, 64 * 256 * 256, layernorm.ONE_PASS_MAX) == ("coop", 256, 1)
    assert plan(4096, 65536, layernorm.ONE_PASS_MAX).kind == "tile"
    # 35_GroupNorm_ (8 groups of 64 channels of 512 x 512), 34_InstanceNorm
    assert plan(112 * 8, 8 * 512 * 512) == ("coop", 128, 2)
    assert plan(112 * 64, 512 * 512) == ("coop", 16, 16)
    # 38/39: rows of 65535, a partial last piece
    assert plan(32768, 65535) == ("coop", 4, 66)
    assert plan(32768, 16384).kind == "tile"  # one piece: one program a row, one pass
    # too few rows to fill 264 slots; a row of more pieces than slots
    assert plan(4, 1 << 20).kind == "rows"
    assert plan(16, 300 * 16384).kind == "rows"
    # under the interpreter the same cut in two launches, never the spin-wait
    assert row_norm.plan(112 * 8, 8 * 512 * 512, 132, True, chunk=16384) == \
        ("pieces", 128, 2)
    # the module's own figures here: pieces of 256 on 4 fake SMs
    assert row_norm.plan(20, 700, 4) == ("pieces", 3, 2)


def _ln_ref(x, ns, w, b, eps):
    return F.layer_norm(x.float(), ns, None if w is None else w.float(),
                        None if b is None else b.float(), eps).to(x.dtype)


# rows past layernorm.COOP_MIN (512 here): the cooperative cut, in two launches; a tail
# piece (1000 = 3 x 256 + 232), whole pieces only (2 x 3 x 128 = 768), several dims
@pytest.mark.parametrize("shape, ns", [((6, 1000), (1000,)), ((4, 2, 3, 128), (2, 3, 128)),
                                       ((3, 4, 9, 37), (4, 9, 37))])
@pytest.mark.parametrize("dtype", [FP32, FP16])
def test_layer_norm_long_rows_take_the_cooperative_cut(shape, ns, dtype):
    rows, n = math.prod(shape[:-len(ns)]), math.prod(ns)
    assert row_norm.plan(rows, n, 4, max_tile=layernorm.COOP_MIN).kind == "pieces"
    x = (2 * torch.randn(shape) + 5).to(dtype)  # far from zero mean
    w, b = (1 + 0.2 * torch.randn(ns)).to(dtype), (0.1 * torch.randn(ns)).to(dtype)
    for ww, bb in ((w, b), (None, None), (w, None), (None, b)):
        ref = _ln_ref(x, ns, ww, bb, 1e-5)
        close(K.layer_norm(x, ww, bb, 1e-5, normalized_shape=ns), ref)
        close(K.layer_norm(x, ww, bb, 1e-5, normalized_shape=ns, cooperative=False), ref)


def test_layer_norm_few_long_rows_keep_the_split_path():
    x = torch.randn(2, 3000) + 3  # rows of 12 pieces: more than the 8 slots
    assert row_norm.plan(2, 3000, 4, max_tile=layernorm.COOP_MIN).kind == "rows"
    close(K.layer_norm(x, eps=1e-6), F.layer_norm(x, (3000,), eps=1e-6))


def _cases():
    """(name, x, rows view, stat, reference, norm_rows keyword arguments)."""
    x = 3 * torch.randn(9, 700) + 2  # 3 pieces, the last partial
    w, b = torch.randn(700), torch.randn(700)
    yield ("layer_norm", x, x, row_norm.MEAN_VAR, F.layer_norm(x, (700,), w, b, 1e-5),
           dict(eps=1e-5, weight=w, bias=b, affine=row_norm.PER_COLUMN))
    g = 3 * torch.randn(3, 6, 16, 16) + 1  # 2 groups of 3 channels of 256: whole pieces,
    wg, bg = torch.randn(6), torch.randn(6)  # one channel each
    yield ("group_norm", g, g.reshape(6, 768), row_norm.MEAN_VAR,
           F.group_norm(g, 2, wg, bg, 1e-5),
           dict(eps=1e-5, weight=wg, bias=bg, affine=row_norm.PER_CHANNEL, groups=2,
                per_group=3, spatial=256))
    h = 3 * torch.randn(3, 6, 10, 11) + 1  # 110 a channel: a piece spans channels
    yield ("group_norm, channels within pieces", h, h.reshape(6, 330), row_norm.MEAN_VAR,
           F.group_norm(h, 2, wg, bg, 1e-6),
           dict(eps=1e-6, weight=wg, bias=bg, affine=row_norm.PER_CHANNEL, groups=2,
                per_group=3, spatial=110))
    i = 2 * torch.randn(2, 5, 23, 29) - 1  # planes of 667: 3 pieces
    yield ("instance_norm", i, i.reshape(10, 667), row_norm.MEAN_VAR,
           F.instance_norm(i, weight=wg[:5], bias=None, eps=1e-5),
           dict(eps=1e-5, weight=wg[:5], affine=row_norm.PER_CHANNEL, groups=5,
                per_group=1, spatial=667))
    r = torch.rand(9, 700)
    yield ("mean_abs", r, r, row_norm.MEAN_ABS, r / r.abs().mean(-1, keepdim=True), {})
    yield ("l2", r - 0.5, r - 0.5, row_norm.L2,
           (r - 0.5) / torch.norm(r - 0.5, p=2, dim=-1, keepdim=True), {})


CASES = list(_cases())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("kind", ["pieces", "rows", "tile"])
def test_each_path(case, kind):
    _, x, rows, stat, ref, kw = case
    r, n = rows.shape
    chunk = row_norm._COOP_CHUNK
    p = -(-n // chunk)
    plan = RowPlan("pieces", p, 2) if kind == "pieces" else RowPlan(kind)
    if kind == "tile":  # a power of two past the row: one program's masked tile
        assert n <= 1024
    y = torch.empty_like(rows)
    cnt = row_norm.norm_rows(rows, y, stat, row_plan=plan, **kw)
    close(y.view(x.shape), ref)
    assert cnt.tolist() == [0] * (r + 1)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cooperative_kernel_under_the_interpreter(case):
    """The one-launch kernel, run here one program after another: each row's last piece
    finds the others arrived and combines their partials; every other piece gives up
    waiting (after 2 polls) and reads the whole row itself."""
    _, x, rows, stat, ref, kw = case
    r, n = rows.shape
    p = -(-n // row_norm._COOP_CHUNK)
    y = torch.empty_like(rows)
    cnt = row_norm.norm_rows(rows, y, stat, row_plan=RowPlan("coop", p, 2), max_spins=2,
                             **kw)
    close(y.view(x.shape), ref)
    assert cnt[:-1].tolist() == [p] * r and cnt[-1] == 1  # all arrived; some gave up


def test_a_plan_cut_otherwise_than_the_kernel_is_refused():
    x = torch.randn(4, 700)
    with pytest.raises(ValueError, match="pieces"):
        row_norm.norm_rows(x, torch.empty_like(x), row_norm.L2, row_plan=RowPlan("coop", 4, 2))


@pytest.mark.parametrize("shape, groups", [((3, 6, 16, 16), 2), ((2, 6, 10, 11), 3),
                                           ((4, 6, 7), 6), ((2, 4, 3, 4, 5), 1), ((5, 6), 3)])
@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_group_norm(shape, groups, dtype):
    x = (3 * torch.randn(shape) + 1).to(dtype)
    c = shape[1]
    w, b = (1 + 0.3 * torch.randn(c)).to(dtype), (0.2 * torch.randn(c)).to(dtype)
    for ww, bb in ((w, b), (None, None), (w, None)):
        close(K.group_norm(x, groups, ww, bb, 1e-5), F.group_norm(x, groups, ww, bb, 1e-5))
        close(K.group_norm(x, groups, ww, bb, 1e-5, cooperative=False),
              F.group_norm(x, groups, ww, bb, 1e-5))


@pytest.mark.parametrize("shape", [(3, 6, 16, 16), (2, 5, 23, 29), (4, 3, 50), (2, 3, 2, 3, 4)])
@pytest.mark.parametrize("dtype", [FP32, FP16])
def test_instance_norm(shape, dtype):
    x = (2 * torch.randn(shape) - 1).to(dtype)
    c = shape[1]
    w, b = (1 + 0.3 * torch.randn(c)).to(dtype), (0.2 * torch.randn(c)).to(dtype)
    for ww, bb in ((None, None), (w, b)):
        ref = F.instance_norm(x.float(), weight=None if ww is None else ww.float(),
                              bias=None if bb is None else bb.float(), eps=1e-5).to(dtype)
        close(K.instance_norm(x, ww, bb, 1e-5), ref)


def test_group_and_instance_norm_refuse_what_torch_refuses():
    with pytest.raises(ValueError, match="groups"):
        K.group_norm(torch.randn(2, 6, 4), 4)
    with pytest.raises(ValueError, match="weight"):
        K.group_norm(torch.randn(2, 6, 4), 3, torch.ones(3))
    with pytest.raises(ValueError, match="spatial"):
        K.instance_norm(torch.randn(2, 6, 1))


@pytest.mark.parametrize("shape", [(6, 33), (9, 300), (20, 700), (3, 2, 1000)])
@pytest.mark.parametrize("dtype", [FP32, BF16])
def test_div_by_row_norm(shape, dtype):
    x = (3 * torch.randn(shape)).to(dtype)
    close(K.div_by_row_norm(x, "mean_abs"), x / x.abs().mean(-1, keepdim=True))
    close(K.div_by_row_norm(x, "l2"), x / torch.norm(x, p=2, dim=-1, keepdim=True))
    close(K.div_by_row_norm(x, "l2", cooperative=False), x / x.norm(dim=-1, keepdim=True))


def test_div_by_row_norm_rounds_the_statistic_as_torch_does():
    """In bf16 PyTorch rounds the mean (or norm) to bf16 before the division: so does the
    kernel, and agrees with it to the last bit here."""
    x = (3 * torch.randn(16, 700)).to(BF16)
    assert torch.equal(K.div_by_row_norm(x, "mean_abs"), x / x.abs().mean(-1, keepdim=True))
    zero = torch.zeros(2, 300)
    assert torch.isnan(K.div_by_row_norm(zero, "l2")).all()  # 0 / 0, as PyTorch's
    with pytest.raises(ValueError, match="unknown row norm"):
        K.div_by_row_norm(zero, "l1")


@pytest.mark.parametrize("dtype", [FP32, FP16])
def test_div_by_row_norm_clamps_the_norm_as_f_normalize(dtype):
    """With ``eps`` the L2 norm is clamped to it first, as ``F.normalize`` does: a row of
    zeros stays zeros (0 / eps; in fp16 eps rounds to 0: NaN as there), small rows are
    divided by eps, the rest as before."""
    x = torch.randn(6, 300)
    x[1] = 0.0
    x[2] *= 1e-6
    x = x.to(dtype)
    ref = F.normalize(x, dim=-1, eps=1e-3)
    out = K.div_by_row_norm(x, "l2", 1e-3)
    close(out, ref)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    close(out[2], (x[2].float() / 1e-3).to(dtype))  # x * (1 / eps): the last bit may differ
    tiny = K.div_by_row_norm(x, "l2", 1e-12)
    assert torch.equal(tiny.isnan(), F.normalize(x, dim=-1).isnan())
    assert torch.equal(K.div_by_row_norm(x, "mean_abs", 1e-3).isnan(),
                       (x / x.abs().mean(-1, keepdim=True)).isnan())  # eps unused there
