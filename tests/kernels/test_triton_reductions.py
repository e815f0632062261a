"""The reductions KernelBench's level 1 left to torch.compile: LayerNorm over several
trailing dims (long rows split over programs), argmax/argmin over any dim, and
cross-entropy, against PyTorch under the interpreter, on odd sizes (no multiple of a
tile), with ties, NaNs, infinities and ignored rows.

The interpreter's tiles are small (``_common``), so these shapes cross tiles, split rows
over programs and take the long-row paths the GPU takes at KernelBench's sizes.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # read by the kernels when they are imported, below

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")  # an optional dependency: solforge[triton]

import solforge.kernels.triton as K  # noqa: E402
from solforge.kernels.triton import arg_reduce_dim, layernorm, layernorm_split  # noqa: E402
from solforge.kernels.triton._common import row_splits  # noqa: E402

BF16, FP32 = torch.bfloat16, torch.float32
NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# -- LayerNorm over several trailing dims ----------------------------------------------------

@pytest.mark.parametrize("shape, ns", [
    ((2, 3, 7, 61), (3, 7, 61)),   # 2 rows of 1281: split over programs
    ((1, 4, 1031), (4, 1031)),     # one row of 4124: many pieces
    ((5, 3, 5, 7), (5, 7)),        # 15 rows of 35: one pass each
])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_over_trailing_dims(shape, ns, affine):
    x = torch.rand(shape) * 3 + 0.5  # as KernelBench draws it: far from zero mean
    w, b = (1 + 0.1 * torch.randn(ns), 0.1 * torch.randn(ns)) if affine else (None, None)
    y = K.layer_norm(x, w, b, 1e-6, normalized_shape=ns)
    assert y.shape == x.shape and y.dtype == x.dtype
    torch.testing.assert_close(y, F.layer_norm(x, ns, w, b, 1e-6), atol=1e-5, rtol=1e-5)


def test_layer_norm_paths_and_eps():
    # which path each shape takes (the interpreter counts 4 SMs: 16 programs fill it)
    assert row_splits(2, 1281, torch.device("cpu"), layernorm_split.TILE)[0] > 1
    assert row_splits(15, 35, torch.device("cpu"), layernorm_split.TILE)[0] == 1
    # a large eps changes the result: it is the module's, as the pattern passes it
    x = torch.rand(2, 3, 11, 13) * 0.01
    for eps in (1e-5, 1e-2):
        m = torch.nn.LayerNorm((3, 11, 13), eps=eps)
        with torch.no_grad():
            m.weight.normal_(1.0, 0.1), m.bias.normal_(0.0, 0.1)
            want = m(x)
        got = K.layer_norm(x, m.weight.detach(), m.bias.detach(), m.eps,
                           normalized_shape=m.normalized_shape)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_layer_norm_long_rows_past_one_program_split_even_when_rows_fill_the_gpu(monkeypatch):
    # rows many enough to fill the device but longer than one program's registers: one
    # piece a row, two launches (ONE_PASS_MAX lowered so the interpreter gets there fast)
    monkeypatch.setattr(layernorm, "ONE_PASS_MAX", 256)
    assert row_splits(20, 509, torch.device("cpu"), layernorm_split.TILE)[0] == 1
    x, w = torch.randn(20, 509) + 3, torch.randn(509)
    torch.testing.assert_close(K.layer_norm(x, w, eps=1e-5), F.layer_norm(x, (509,), w),
                               atol=1e-5, rtol=1e-5)


def test_layer_norm_split_statistics_stay_exact_far_from_zero_mean():
    # Chan's merge of per-tile (mean, M2): E[x^2] - E[x]^2 in fp32 would lose ~1e-3 here
    x = torch.randn(2, 5, 211) + 100.0
    want = F.layer_norm(x.double(), (5, 211)).float()
    torch.testing.assert_close(K.layer_norm(x, normalized_shape=(5, 211)), want, atol=1e-4,
                               rtol=0)


def test_layer_norm_bf16_and_views_and_bad_shapes():
    x = (torch.randn(2, 6, 9, 23) * 2).to(BF16)
    w, b = (1 + 0.1 * torch.randn(9, 23)).to(BF16), (0.1 * torch.randn(9, 23)).to(BF16)
    ref = F.layer_norm(x.float(), (9, 23), w.float(), b.float()).to(BF16)
    torch.testing.assert_close(K.layer_norm(x, w, b, normalized_shape=(9, 23)).float(),
                               ref.float(), atol=8e-3, rtol=8e-3)
    xt = torch.randn(3, 9, 7, 2).transpose(1, 3)  # not contiguous: read through a copy
    torch.testing.assert_close(K.layer_norm(xt, normalized_shape=(7, 9)),
                               F.layer_norm(xt, (7, 9)), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="trailing dims"):
        K.layer_norm(torch.randn(4, 5, 6), normalized_shape=(4, 5))
    with pytest.raises(ValueError, match="weight has shape"):
        K.layer_norm(torch.randn(4, 5, 6), torch.ones(30), normalized_shape=(5, 6))


# -- argmax / argmin over any dim ------------------------------------------------------------

def _ties_nans_infs(shape):
    x = torch.randint(0, 4, shape).float()  # many equal maxima and minima
    x[torch.rand(shape) < 0.02] = NAN
    return x


@pytest.mark.parametrize("shape, dim", [
    ((3, 45, 37), 1),      # KernelBench's form: [A, K, B] with odd K and B
    ((1000, 7), 0),        # one column tile: K split over programs, then combined
    ((2, 5, 3, 33), 1),    # several dims after the reduced one
    ((3, 20, 35), -3),     # the first dim, negative
    ((4, 6, 1), 1),        # nothing after it but a 1: the row kernel
    ((2, 1031), 1),        # the last dim: the row kernel, rows split
])
@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_reduce_dim_matches_torch_with_ties_and_nans(shape, dim, keepdim):
    clean = torch.randint(0, 4, shape).float()
    for x in (clean, _ties_nans_infs(shape)):
        for mine, ref in ((K.argmax_dim, torch.argmax), (K.argmin_dim, torch.argmin)):
            got, want = mine(x, dim, keepdim), ref(x, dim=dim, keepdim=keepdim)
            assert got.dtype == torch.int64 and got.shape == want.shape
            assert torch.equal(got, want), (mine.__name__, shape, dim)


def test_arg_reduce_dim_infinities_first_index_and_nan_first():
    x = torch.full((3, 40, 5), -INF)  # all -inf: index 0, as torch
    x[1, 7:, 2] = INF               # +inf from 7 on: the first, 7
    x[2, 30, :] = NAN
    x[2, 12, :] = NAN               # two NaNs: the first, 12
    assert torch.equal(K.argmax_dim(x, 1), torch.argmax(x, 1))
    assert torch.equal(K.argmin_dim(x, 1), torch.argmin(x, 1))
    assert K.argmax_dim(x, 1)[2].tolist() == [12] * 5 and K.argmax_dim(x, 1)[1, 2] == 7
    x = -x  # argmin of +inf columns, and a -inf below: symmetric
    assert torch.equal(K.argmin_dim(x, 1), torch.argmin(x, 1))


def test_arg_reduce_dim_split_over_k_keeps_the_first_tie_across_pieces():
    pieces, chunk = arg_reduce_dim._k_pieces(1, 1000, 7, torch.device("cpu"))
    assert pieces > 1
    x = torch.zeros(1000, 7)
    x[chunk + 3] = 5.0       # the maximum first in the second piece...
    x[3 * chunk + 1] = 5.0   # ...and again in a later one
    x[2 * chunk + 5, 4] = NAN  # a NaN in one column only, in the third piece
    got = K.argmax_dim(x, 0)
    assert torch.equal(got, torch.argmax(x, 0))
    assert got[0] == chunk + 3 and got[4] == 2 * chunk + 5


def test_arg_reduce_dim_views_dtypes_and_refusals():
    base = torch.randn(4, 33, 20)
    view = base[:, 1:]  # a strided view read as it is
    assert torch.equal(K.argmax_dim(view, 1), torch.argmax(view, 1))
    xt = base.transpose(0, 2)  # not [A, K, B] by strides: a copy
    assert torch.equal(K.argmin_dim(xt, 1, keepdim=True), torch.argmin(xt, 1, keepdim=True))
    xb = torch.randn(3, 40, 9).to(BF16)
    assert torch.equal(K.argmax_dim(xb, 1), torch.argmax(xb, 1))
    assert K.argmax_dim(torch.randn(0, 5, 3), 1).shape == (0, 3)
    with pytest.raises(ValueError, match="floating-point"):
        K.argmax_dim(torch.arange(12).view(3, 4), 0)
    with pytest.raises(ValueError, match="empty dim"):
        K.argmin_dim(torch.randn(3, 0, 4), 1)


def test_row_argmin_over_the_last_dim():
    x = _ties_nans_infs((2, 1031))  # few long rows: split over programs
    assert torch.equal(K.argmin(x), x.argmin(-1))
    x = torch.randint(0, 3, (20, 300)).float()
    assert torch.equal(K.argmin(x), x.argmin(-1))


# -- cross-entropy -----------------------------------------------------------------------------

def _targets(n, c, ignore_index=-100):
    t = torch.randint(0, c, (n,))
    t[::3] = ignore_index  # a third of the rows ignored
    return t


@pytest.mark.parametrize("n, c", [(9, 61), (33, 509), (5, 1031), (7, 1)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch_with_ignored_rows(n, c, reduction):
    x = torch.randn(n, c) * 3
    t = _targets(n, c)
    if c > 1:
        t[1] = c - 1  # the last class: the masked end of the last tile
    got = K.cross_entropy(x, t, reduction=reduction)
    want = F.cross_entropy(x, t, reduction=reduction)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_cross_entropy_ignore_index_and_edge_rows():
    x, t = torch.randn(10, 77), torch.randint(0, 77, (10,))
    t[[2, 5]] = 7  # a real class used as the ignored one
    torch.testing.assert_close(K.cross_entropy(x, t, 7), F.cross_entropy(x, t, ignore_index=7))
    t = torch.full((4,), -100)  # every row ignored: 0 / 0 for the mean, 0 for the sum
    assert K.cross_entropy(x[:4], t).isnan() and F.cross_entropy(x[:4], t).isnan()
    assert K.cross_entropy(x[:4], t, reduction="sum") == 0
    x = torch.randn(3, 200)
    x[1] = -INF     # a row of -inf only: NaN, as torch
    x[2, 5] = -INF  # the target's logit -inf: an infinite loss
    t = torch.tensor([1, 2, 5])
    torch.testing.assert_close(K.cross_entropy(x, t, reduction="none"),
                               F.cross_entropy(x, t, reduction="none"), equal_nan=True)


def test_cross_entropy_16bit_logits_and_a_deterministic_mean():
    x, t = (torch.randn(40, 300) * 3).to(BF16), _targets(40, 300)
    # read as bf16, computed and written in fp32: F.cross_entropy of the fp32 upcast
    got = K.cross_entropy(x, t, out_dtype=FP32)
    torch.testing.assert_close(got, F.cross_entropy(x.float(), t), atol=1e-5, rtol=1e-5)
    # in bf16: torch rounds the log-probabilities first; within bf16's step
    torch.testing.assert_close(K.cross_entropy(x, t).float(), F.cross_entropy(x, t).float(),
                               atol=2e-2, rtol=1e-2)
    assert torch.equal(K.cross_entropy(x, t, out_dtype=FP32), got)  # the same bits again


def test_cross_entropy_refusals():
    x = torch.randn(4, 10)
    with pytest.raises(ValueError, match=r"\[N, C\] logits"):
        K.cross_entropy(torch.randn(2, 10, 3), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="class indices"):
        K.cross_entropy(x, torch.rand(4, 10))  # probabilities as targets
    with pytest.raises(ValueError, match="reduction"):
        K.cross_entropy(x, torch.zeros(4, dtype=torch.long), reduction="batchmean")
