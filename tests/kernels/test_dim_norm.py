"""``div_by_dim_norm`` (a tensor divided by its RMS, L2 norm or mean |x| over a middle dim)
against PyTorch's own expressions, under the interpreter: both paths (the whole dim in one
register tile: up to 16 under the interpreter; longer dims walked twice in tiles), the
first and a middle dim, a layout read in place and one copied first, every float dtype
(16-bit results equal to eager's to the last bit: each rounding PyTorch makes is made),
NaN and all-zero slices, an fp16 square past its range, and the refusals."""

import os

os.environ["TRITON_INTERPRET"] = "1"  # read by the kernels when they are imported, below

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")  # an optional dependency: solforge[triton]

from solforge.kernels.triton import div_by_dim_norm  # noqa: E402

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


def _eager(x: torch.Tensor, dim: int, norm: str, eps: float) -> torch.Tensor:
    if norm == "rms":
        return x / torch.sqrt(torch.mean(x ** 2, dim=dim, keepdim=True) + eps)
    if norm == "mean_abs":
        return x / x.abs().mean(dim, keepdim=True)
    if eps:
        return F.normalize(x, p=2, dim=dim, eps=eps)
    return x / torch.norm(x, p=2, dim=dim, keepdim=True)


CASES = [  # shape, dim: K of 12 (one tile), 40 (walked twice), the first dim, a 5-D middle
    ((3, 12, 5, 7), 1),
    ((2, 40, 33), 1),
    ((9, 4, 6), 0),
    ((2, 3, 5, 2, 4), -3),
]


@pytest.mark.parametrize("shape, dim", CASES)
@pytest.mark.parametrize("norm, eps", [("rms", 1e-5), ("l2", 0.0), ("l2", 1e-3),
                                       ("mean_abs", 0.0)])
def test_matches_eager(shape, dim, norm, eps):
    torch.manual_seed(0)
    x = 2 * torch.randn(shape)
    out = div_by_dim_norm(x, dim, norm, eps)
    assert out.shape == x.shape and out.dtype == FP32 and out.is_contiguous()
    torch.testing.assert_close(out, _eager(x, dim, norm, eps), rtol=2e-6, atol=2e-6)
    for dt in (FP16, BF16):  # every rounding of eager's made: equal to the last bit
        xl = x.to(dt)
        assert torch.equal(div_by_dim_norm(xl, dim, norm, eps), _eager(xl, dim, norm, eps))


def test_a_strided_view_is_read_in_place_or_copied():
    torch.manual_seed(1)
    base = torch.randn(4, 30, 6, 5)
    sliced = base[1:, 3:]  # reads as [A, K, B] by strides: no copy
    permuted = torch.randn(5, 6, 20).permute(2, 0, 1)  # does not: copied first
    for x in (sliced, permuted):
        torch.testing.assert_close(div_by_dim_norm(x, 1, "rms", 1e-6),
                                   _eager(x, 1, "rms", 1e-6), rtol=2e-6, atol=2e-6)


def test_nan_zero_and_overflow_as_eager():
    x = torch.rand(2, 6, 4, dtype=FP32) + 0.5
    x[0, 2, 1] = float("nan")  # NaN spreads to its own slice (column 1 of sample 0) only
    x[1, :, 3] = 0.0  # an all-zero slice: 0 / 0
    for norm in ("rms", "l2", "mean_abs"):
        out, ref = div_by_dim_norm(x, 1, norm), _eager(x, 1, norm, 0.0)
        assert torch.equal(out.isnan(), ref.isnan()) and out.isnan().sum() == 12
        torch.testing.assert_close(out.nan_to_num(), ref.nan_to_num(), rtol=2e-6, atol=2e-6)
    # F.normalize's eps keeps the zero slice finite (0 / eps)
    assert torch.equal(div_by_dim_norm(x, 1, "l2", 1e-12)[1, :, 3], torch.zeros(6))
    big = torch.full((2, 3, 4), 300.0, dtype=FP16)  # 300 ** 2 is past fp16's 65504: inf
    assert torch.equal(div_by_dim_norm(big, 1, "rms", 1e-5), _eager(big, 1, "rms", 1e-5))
    assert (div_by_dim_norm(big, 1, "rms", 1e-5) == 0).all()


def test_refusals_say_what_to_use():
    x = torch.randn(3, 4, 5)
    with pytest.raises(ValueError, match="div_by_row_norm"):
        div_by_dim_norm(x, -1, "rms")
    with pytest.raises(ValueError, match="dim=4"):  # past the rank: not wrapped round
        div_by_dim_norm(x, 4, "rms")
    with pytest.raises(ValueError, match="unknown norm 'l1'"):
        div_by_dim_norm(x, 1, "l1")
    with pytest.raises(ValueError, match="floating-point"):
        div_by_dim_norm(torch.ones(3, 4, 5, dtype=torch.int32), 1, "l2")
    with pytest.raises(ValueError, match="empty"):
        div_by_dim_norm(torch.randn(3, 0, 5), 1, "l2")
