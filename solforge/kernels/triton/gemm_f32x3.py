"""fp32 GEMM at fp32 accuracy on the tensor cores (3xTF32), with a bias and an activation
fused into its epilogue.

PyTorch computes fp32 matmuls on the fp32 SIMT units unless TF32 is allowed
(``torch.backends.cuda.matmul.allow_tf32``, off by default), and TF32 alone rounds each
operand to 10 mantissa bits: KernelBench's problems at a 1e-4 tolerance fail with it. Split
each operand into a TF32 part and the TF32 rounding of what is left (``a = a_hi + a_lo``),
and ``a_hi*b_hi + a_hi*b_lo + a_lo*b_hi`` on the TF32 tensor cores keeps about 21 bits of
each product, accumulated in fp32: errors of the order of an fp32 GEMM's own (the term
dropped, ``a_lo*b_lo``, is 2^-22 of the product). That is Triton's
``tl.dot(..., input_precision="tf32x3")`` (CUTLASS's ``OpMultiplyAddFastF32``): three TF32
products per fp32 product, a third of the TF32 rate, against the fp32 SIMT rate (an H100:
TF32 417 TFLOP/s measured, so about 139 for 3xTF32, against 54 for fp32;
``benchmarks/results/2026-12-06-h100-s20/call1_calibration.json``). Triton's own tutorial
GEMM at 3xTF32 ran at 1.6x cuBLAS's fp32 GEMM on an A100 (triton-lang/triton#3234); on
Hopper this kernel is not measured yet (``benchmarks/gpu/gemm_probe.py``).

:func:`matmul_f32x3` computes ``act(a @ b + bias)``: ``a`` [..., M, K] and ``b`` [K, N]
(the leading dims of ``a`` folded into M), or ``a`` [..., M, K] and ``b`` [..., K, N]
with the same batch dims (folded into one), any strides (``W.t()`` of a linear layer's weight is read in place); ``bias`` [N]; the
activation one of ``_common.ACTIVATIONS`` or ``"relu"``. Tiles are visited in groups of
``GROUP_M`` row tiles so that neighbouring programs share ``b``'s tiles in L2.

Not covered: dtypes other than fp32 (16-bit GEMMs have their own tensor cores, and
cuBLAS is at their speed of light already); broadcasting batch dims other than a 2-D
``b``; a bias other than [N]; other epilogues (scales, residuals: they stay in the
reference's graph after the call); bit-equality with cuBLAS (the sums run in another
order, as any two GEMMs' do); split-K (a GEMM with few output tiles and a long K runs on
few SMs). Under the interpreter ``tl.dot`` computes in plain fp32, so CPU tests check the
indexing, masks and epilogue, not the 3xTF32 error (the GPU test does).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import (
    ACTIVATIONS,
    apply_activation,
    autotune_configs,
)

RELU = tl.constexpr(max(ACTIVATIONS.values()) + 1)  # the epilogue's own code for ReLU
_ACTS = {**ACTIVATIONS, "relu": RELU.value}


def _configs() -> list[triton.Config]:
    # fp32 tiles are 4 bytes an element: a 128x128x32 stage is 32 KiB of shared memory.
    # The split operands double the registers a tile needs: compiled for sm_90 (Triton 3.6
    # and 3.9, ptxas's resource usage), 128x256 and 256x128 tiles spill at 8 warps and are
    # capped at 128 registers at 16; 128x128x32 at 4 warps spills 1 KiB. These do not, or
    # barely (128x128x32 at 8 warps: 72 bytes on 3.9).
    gpu = []
    for bm, bn, bk, warps, stages in ((128, 128, 16, 8, 4), (128, 128, 16, 8, 5),
                                      (128, 128, 32, 8, 3), (128, 64, 32, 8, 4),
                                      (64, 128, 32, 4, 3), (64, 256, 16, 8, 4),
                                      (64, 128, 16, 4, 5), (64, 64, 32, 4, 5)):
        gpu.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                                 num_warps=warps, num_stages=stages))
    # the interpreter: small tiles, so CPU shapes cross tiles and masks in every dim
    return autotune_configs(gpu, triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16,
                                                "GROUP_M": 2}, num_warps=4))


@triton.autotune(configs=_configs(), key=["M", "N", "K", "HAS_BIAS", "ACT"])
@triton.jit
def _mm_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
               s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn,
               HAS_BIAS: tl.constexpr, ACT: tl.constexpr, PRECISION: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * tiles_n
    first_m = (pid // in_group) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % in_group) % group_m
    tile_n = (pid % in_group) // group_m

    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = (a_ptr + batch * s_ab + rows[:, None].to(tl.int64) * s_am
              + ks[None, :].to(tl.int64) * s_ak)
    b_ptrs = (b_ptr + batch * s_bb + ks[:, None].to(tl.int64) * s_bk
              + cols[None, :].to(tl.int64) * s_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < left), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < left) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * s_ak
        b_ptrs += BLOCK_K * s_bk

    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
        acc += bias[None, :].to(tl.float32)
    if ACT == RELU:
        acc = tl.maximum(acc, 0.0)
    else:
        acc = apply_activation(acc, ACT)
    c_ptrs = (c_ptr + batch * s_cb + rows[:, None].to(tl.int64) * s_cm
              + cols[None, :].to(tl.int64) * s_cn)
    tl.store(c_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def _check(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> None:
    for name, t in (("a", a), ("b", b), ("bias", bias)):
        if t is not None and t.dtype != torch.float32:
            raise TypeError(f"matmul_f32x3: {name} is {t.dtype}; this kernel is for float32 "
                            "(16-bit GEMMs have tensor cores of their own)")
    if a.dim() < 2 or b.dim() < 2 or (b.dim() > 2 and a.shape[:-2] != b.shape[:-2]):
        raise ValueError(f"matmul_f32x3: a {tuple(a.shape)} @ b {tuple(b.shape)}: use a "
                         "[..., M, K] with b [K, N], or both with the same batch dims")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul_f32x3: shapes {tuple(a.shape)} and {tuple(b.shape)} do "
                         "not multiply")
    if bias is not None and tuple(bias.shape) != (b.shape[-1],):
        raise ValueError(f"matmul_f32x3: bias has shape {tuple(bias.shape)}; expected "
                         f"({b.shape[-1]},)")


def matmul_f32x3(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                 activation: str | None = None, *, precision: str = "tf32x3"
                 ) -> torch.Tensor:
    """``activation(a @ b + bias)`` in fp32 at fp32 accuracy (see the module docstring).
    ``precision`` is ``tl.dot``'s ``input_precision``: ``"tf32x3"``, or ``"ieee"`` for the
    same kernel on the SIMT units (a comparison point for probes)."""
    _check(a, b, bias)
    try:
        act = _ACTS[activation]
    except KeyError:
        raise ValueError(f"matmul_f32x3: unknown activation {activation!r}; use one of "
                         f"{', '.join(repr(k) for k in _ACTS if k)} or None") from None
    k, n = b.shape[-2], b.shape[-1]
    lead = a.shape[:-1]
    rows = a.shape[:-2].numel() * a.shape[-2]
    if b.dim() == 2:
        a3 = a.reshape(1, rows, k)  # a view when the leading dims fold, else a copy
        b3 = b.unsqueeze(0)
    else:  # batch dims folded into one (views where the strides allow)
        batch = a.shape[:-2].numel()
        a3, b3 = a.reshape(batch, *a.shape[-2:]), b.reshape(batch, *b.shape[-2:])
    batches, m = a3.shape[0], a3.shape[1]
    c = torch.empty((batches, m, n), dtype=torch.float32, device=a.device)
    if c.numel():
        if k == 0:
            c.zero_()
            if bias is not None:
                c += bias
            return _finish(c, lead, n, activation)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),
                             batches)
        _mm_kernel[grid](a3, b3, bias if bias is not None else c, c, m, n, k,
                         a3.stride(0), a3.stride(1), a3.stride(2),
                         b3.stride(0) if b.dim() > 2 else 0, b3.stride(1), b3.stride(2),
                         c.stride(0), c.stride(1), c.stride(2),
                         HAS_BIAS=bias is not None, ACT=act, PRECISION=precision)
    return c.view(*lead, n)


def linear_f32x3(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 activation: str | None = None) -> torch.Tensor:
    """``activation(F.linear(x, weight, bias))``: :func:`matmul_f32x3` with the [N, K]
    weight read in place as its transpose."""
    if weight.dim() != 2:
        raise ValueError(f"linear_f32x3: weight has shape {tuple(weight.shape)}; expected "
                         "[out_features, in_features]")
    return matmul_f32x3(x, weight.t(), bias, activation)


def _finish(c: torch.Tensor, lead: torch.Size, n: int, activation: str | None) -> torch.Tensor:
    """The epilogue for an empty K (no tile to run it): the activation of the bias."""
    fn = {None: None, "none": None, "relu": torch.relu, "silu": torch.nn.functional.silu,
          "gelu": torch.nn.functional.gelu,
          "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}[activation]
    return (fn(c) if fn is not None else c).view(*lead, n)


__all__ = ["linear_f32x3", "matmul_f32x3"]
