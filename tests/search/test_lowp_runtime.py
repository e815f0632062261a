"""The low-precision GEMMs generated solutions call (``search/runtime.py``): the TF32 one
and the one on the FP8/int8 units themselves, run for real on the CPU (PyTorch's CPU
build has ``_scaled_mm`` and ``_int_mm``; the shape rules applied are CUDA's)."""

from __future__ import annotations

import warnings

import pytest
import torch

from solforge.search import runtime
from solforge.search.runtime import _native_shape, exact_lowp_matmul, native_lowp_matmul

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _fp8(*shape: int, dtype: torch.dtype = E4M3) -> torch.Tensor:
    return (torch.randn(*shape) * 8).to(dtype)


def _int8(*shape: int) -> torch.Tensor:
    return torch.randint(-128, 128, shape, dtype=torch.int8)


class _Spy:
    """Counts the calls to a real PyTorch function and passes them on."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def spies(monkeypatch):
    s = {"scaled": _Spy(torch._scaled_mm), "int": _Spy(torch._int_mm)}
    monkeypatch.setattr(torch, "_scaled_mm", s["scaled"])
    monkeypatch.setattr(torch, "_int_mm", s["int"])
    monkeypatch.setattr(runtime, "_NATIVE_REFUSED", set())
    return s


def test_shape_rules_are_cudas():
    assert _native_shape(_fp8(1, 4096), _fp8(6144, 4096)) == "fp8"  # decode M=1 is fine
    assert _native_shape(_fp8(4, 257), _fp8(16, 257)) is None        # K off 16
    assert _native_shape(_fp8(4, 64), _fp8(131, 64)) is None         # N off 16
    assert _native_shape(_fp8(4, 64, dtype=E5M2), _fp8(16, 64, dtype=E5M2)) is None
    assert _native_shape(_fp8(4, 64), _fp8(16, 64, dtype=E5M2)) == "fp8"
    assert _native_shape(_int8(64, 4096), _int8(6144, 4096)) == "int8"
    assert _native_shape(_int8(16, 64), _int8(64, 64)) == "int8_padded"  # M must exceed 16
    assert _native_shape(_int8(1, 64), _int8(64, 64)) == "int8_padded"
    assert _native_shape(_int8(32, 60), _int8(64, 60)) is None       # K off 8
    assert _native_shape(_int8(32, 64), _fp8(64, 64)) is None        # mixed kinds
    assert _native_shape(_fp8(64, 32).t(), _fp8(16, 64)) is None     # not row-major
    # bf16/fp16 pairs take torch.mm with an fp32 out_dtype, which only has a GPU kernel
    bf = torch.randn(32, 64, dtype=torch.bfloat16)
    assert _native_shape(bf, bf) is None


def test_16_bit_operands_are_exact_on_the_tf32_path():
    a, b = torch.randn(32, 64, dtype=torch.bfloat16), torch.randn(48, 64, dtype=torch.bfloat16)
    _close(native_lowp_matmul(a, b), torch.nn.functional.linear(a.float(), b.float()))
    h = torch.randn(32, 64, dtype=torch.float16)
    _close(exact_lowp_matmul(h, h, torch.tensor([0.5])), 0.5 * (h.float() @ h.float().t()))


def _close(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Equal up to fp32 summation order: relative to the output's scale (sums that cancel
    near zero differ by more than their own size)."""
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6 * float(ref.abs().max()))


def test_fp8_per_tensor_scales_go_into_the_native_gemm(spies):
    a, b = _fp8(32, 64), _fp8(48, 64)
    sa, sb = torch.tensor([0.02]), torch.tensor([0.5])
    ref = torch.matmul(a.float() * sa, (b.float() * sb).t())
    out = native_lowp_matmul(a, b, sa, sb)
    assert spies["scaled"].calls == 1
    assert out.dtype == torch.float32 and out.shape == (32, 48)
    _close(out, ref)
    _close(out, exact_lowp_matmul(a, b, sa, sb))


def test_fp8_per_row_scales_apply_after_the_gemm(spies):
    a, b = _fp8(32, 64), _fp8(48, 64)
    sa, sb = torch.rand(32, 1) + 0.5, torch.rand(48, 1) + 0.5
    ref = torch.matmul(a.float() * sa, (b.float() * sb).t())
    _close(native_lowp_matmul(a, b, sa, sb), ref)
    assert spies["scaled"].calls == 1


def test_int8_products_are_summed_exactly(spies):
    a, b = _int8(32, 4096), _int8(48, 4096)
    out = native_lowp_matmul(a, b)
    assert spies["int"].calls == 1
    exact = (a.to(torch.int64) @ b.to(torch.int64).t()).to(torch.float32)
    assert torch.equal(out, exact)  # the fp32 sum of the reference rounds; this does not
    ref = torch.mm(a.float(), b.float().t())
    _close(out, ref)


@pytest.mark.parametrize("m", [1, 16])
def test_int8_decode_rows_are_padded_for_the_native_gemm(spies, m):
    a, b = _int8(m, 4096), _int8(48, 4096)
    sa, sb = torch.rand(m, 1) + 0.5, torch.rand(48, 1) + 0.5
    out = native_lowp_matmul(a, b, sa, sb)
    assert spies["int"].calls == 1 and out.shape == (m, 48) and out.dtype == torch.float32
    exact = (a.to(torch.int64) @ b.to(torch.int64).t()).to(torch.float32) * sa * sb.reshape(1, -1)
    assert torch.equal(out, exact)


def test_shapes_the_native_gemm_does_not_take_run_on_tf32(spies):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a rule-based fallback is silent
        a, b = _int8(4, 60), _int8(48, 60)  # K off 8
        torch.testing.assert_close(native_lowp_matmul(a, b), exact_lowp_matmul(a, b))
        a, b = _fp8(13, 509), _fp8(131, 509)
        s = torch.tensor([0.25])
        torch.testing.assert_close(native_lowp_matmul(a, b, s, s),
                                   exact_lowp_matmul(a, b, s, s))
    assert spies["scaled"].calls == 0 and spies["int"].calls == 0


def test_a_refused_signature_warns_once_then_goes_straight_to_tf32(spies):
    a, b = _fp8(32, 64), _fp8(48, 64)
    bad = torch.tensor([0.5], dtype=torch.float64)
    real = spies["scaled"].fn

    def strict(*args, **kwargs):
        # PyTorch 2.13's CPU build takes float64 scales: this one refuses them, as a
        # PyTorch with a stricter rule does (the refusal the docstring is about)
        if any(isinstance(x, torch.Tensor) and x.dtype == torch.float64
               for x in (*args, *kwargs.values())):
            raise RuntimeError("scale_a must be float32")
        return real(*args, **kwargs)

    spies["scaled"].fn = strict
    with pytest.warns(RuntimeWarning, match="refused the fp8 GEMM"):
        out = native_lowp_matmul(a, b, bad, bad)
    torch.testing.assert_close(out.float(), exact_lowp_matmul(a, b, bad, bad).float())
    assert spies["scaled"].calls == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        native_lowp_matmul(a, b, bad, bad)
    assert spies["scaled"].calls == 1  # not asked again for that signature
