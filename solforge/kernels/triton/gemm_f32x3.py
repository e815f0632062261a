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
GEMM at 3xTF32 ran at 1.6x cuBLAS's fp32 GEMM on an A100 (triton-lang/triton#3234). On an
H100 (Triton 3.6) this kernel ran at 66-71 TFLOP/s, 1.32-1.38x cuBLAS's fp32 GEMM, with an
error against float64 about 5x smaller than cuBLAS's (KernelBench 2_12's 1024x8192x8192,
MinGPT's 65536x2304x768: ``benchmarks/results/2026-12-06-h100-s22/probes``); half the
3xTF32 bound, so the tiles are the first thing to tune (``benchmarks/gpu/gemm_probe.py``).

:func:`matmul_f32x3` computes ``a @ b + bias`` and an epilogue of up to ``MAX_STEPS``
steps on the fp32 tile before it is stored (``STEPS``: GELU, SiLU, ReLU, sigmoid, tanh,
leaky ReLU, clamps, ``+ - * /`` a number, one residual tensor added). ``a`` [..., M, K]
with ``b`` [K, N] (the leading dims of ``a`` folded into M), or both with the same batch
dims (folded into one), any strides (``W.t()`` of a linear layer's weight is read in
place: :func:`linear_f32x3`; an operand whose K is not its contiguous dim is copied
K-major first when the GEMM is large: ``_k_major``); ``bias`` [N]. Tiles are visited in
groups of ``GROUP_M`` row tiles so that neighbouring programs share ``b``'s tiles in L2.
A GEMM with few output tiles and a long K (``_split_k``) is cut along K: each run of K
blocks a program of its own, the partial tiles summed in fp32.

Not covered: dtypes other than fp32 (16-bit GEMMs have their own tensor cores, and
cuBLAS is at their speed of light already); broadcasting batch dims other than a 2-D
``b``; a bias other than [N]; epilogue steps that read tensors other than one residual of
the output's shape (a per-column scale, a broadcast bias: they stay in the reference's
graph after the call); bit-equality with cuBLAS (the sums run in another
order, as any two GEMMs' do); a split-K GEMM's epilogue fused in the kernel (it runs
after the sum, in PyTorch: one more pass over a small output); split-K for GEMMs with few
tiles and a K under two ``SPLIT_CHUNK``s. Under the interpreter ``tl.dot`` computes in
plain fp32, so CPU tests check the indexing, masks and epilogue, not the 3xTF32 error
(the GPU test does).
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

# The epilogue: up to MAX_STEPS steps after the bias, each an op code and a number (the
# scalar of ``add``/``mul``/..., the slope of ``leaky_relu``, the bound of a clamp).
STEPS = {"none": 0, "gelu": 1, "gelu_tanh": 2, "silu": 3, "relu": 4, "add": 5, "mul": 6,
         "rsub": 7, "div": 8, "leaky_relu": 9, "sigmoid": 10, "tanh": 11, "clamp_min": 12,
         "clamp_max": 13, "residual": 14}
MAX_STEPS = 4
# the activations a caller may name alone (``activation=``)
_ACTS = {None: (), **{k: ((k, 0.0),) for k in ACTIVATIONS if k}, "relu": (("relu", 0.0),)}


@triton.jit
def _step(x, OP: tl.constexpr, c, r_base, r_off, r_mask):
    """One epilogue step on the fp32 tile ``x`` (``STEPS``' codes)."""
    if OP == 1 or OP == 2 or OP == 3:
        x = apply_activation(x, OP)  # _common's codes: gelu, gelu_tanh, silu
    elif OP == 4:
        x = tl.maximum(x, 0.0)
    elif OP == 5:
        x = x + c
    elif OP == 6:
        x = x * c
    elif OP == 7:
        x = c - x
    elif OP == 8:
        x = x / c
    elif OP == 9:
        x = tl.where(x > 0, x, x * c)
    elif OP == 10:
        x = tl.sigmoid(x)
    elif OP == 11:
        x = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)
    elif OP == 12:
        x = tl.maximum(x, c)
    elif OP == 13:
        x = tl.minimum(x, c)
    elif OP == 14:
        x = x + tl.load(r_base + r_off, mask=r_mask, other=0.0).to(tl.float32)
    return x


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


@triton.autotune(configs=_configs(),
                 key=["M", "N", "K", "SPLIT", "HAS_BIAS", "OP1", "OP2", "OP3", "OP4"])
@triton.jit
def _mm_kernel(a_ptr, b_ptr, bias_ptr, r_ptr, c_ptr, M, N, K, SPLIT,
               s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_rb, s_rm, s_rn, s_cs, s_cb, s_cm, s_cn,
               c1, c2, c3, c4,
               HAS_BIAS: tl.constexpr, OP1: tl.constexpr, OP2: tl.constexpr,
               OP3: tl.constexpr, OP4: tl.constexpr, PRECISION: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
    # program (tile, batch, split): a split-K launch (SPLIT > 1) gives each split an equal
    # run of whole K blocks and stores its partial tile at c + split * s_cs, unreduced
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    k_per = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT) * BLOCK_K
    k_lo = split * k_per
    k_len = tl.minimum(K - k_lo, k_per)  # <= 0 for a split past the end: nothing to add
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
              + (k_lo + ks[None, :]).to(tl.int64) * s_ak)
    b_ptrs = (b_ptr + batch * s_bb + (k_lo + ks[:, None]).to(tl.int64) * s_bk
              + cols[None, :].to(tl.int64) * s_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(k_len, BLOCK_K)):
        left = k_len - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < left), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < left) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * s_ak
        b_ptrs += BLOCK_K * s_bk

    out_mask = (rows[:, None] < M) & (cols[None, :] < N)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
        acc += bias[None, :].to(tl.float32)
    # the residual's tile: one base pointer per tile, 32-bit offsets within it (64-bit
    # pointers for every element of the tile spilled 352 bytes a thread on sm_90)
    r_base = r_ptr + batch * s_rb + (tile_m * BLOCK_M).to(tl.int64) * s_rm \
        + (tile_n * BLOCK_N).to(tl.int64) * s_rn
    r_off = tl.arange(0, BLOCK_M)[:, None] * s_rm + tl.arange(0, BLOCK_N)[None, :] * s_rn
    acc = _step(acc, OP1, c1, r_base, r_off, out_mask)
    acc = _step(acc, OP2, c2, r_base, r_off, out_mask)
    acc = _step(acc, OP3, c3, r_base, r_off, out_mask)
    acc = _step(acc, OP4, c4, r_base, r_off, out_mask)
    c_ptrs = (c_ptr + split.to(tl.int64) * s_cs + batch * s_cb
              + rows[:, None].to(tl.int64) * s_cm + cols[None, :].to(tl.int64) * s_cn)
    tl.store(c_ptrs, acc, mask=out_mask)


# Split-K (``_split_k``): a GEMM with fewer than SPLIT_BELOW_TILES output tiles of 64x64
# (KernelBench's 6_Matmul_with_large_K_dimension_: 256x256 with K = 524288, 16 tiles on
# an H100's 132 SMs) and a K of at least two SPLIT_CHUNKs is cut along K into enough
# splits for about SPLIT_PROGRAMS programs of 64x64, at most MAX_SPLIT, each at least a
# SPLIT_CHUNK of K long. Measured on an H100 at that shape: 1.65 ms (41.6 TFLOP/s)
# against cuBLAS fp32's 1.32 ms (benchmarks/results/2026-12-06-h100-s25), so the search's
# pattern does not offer such GEMMs (``search/patterns/gemm_f32x3.MIN_TILES``)
SPLIT_BELOW_TILES = 128
SPLIT_CHUNK = 2048
SPLIT_PROGRAMS = 512
MAX_SPLIT = 64


def _split_k(m: int, n: int, k: int, batches: int) -> int:
    """How many runs of K a GEMM of ``batches`` [M, K] @ [K, N] products is cut into: 1
    unless it has few output tiles and a long K (the constants above)."""
    tiles = batches * triton.cdiv(m, 64) * triton.cdiv(n, 64)
    if tiles >= SPLIT_BELOW_TILES or k < 2 * SPLIT_CHUNK:
        return 1
    return max(1, min(triton.cdiv(SPLIT_PROGRAMS, tiles), k // SPLIT_CHUNK, MAX_SPLIT))


# Operands are copied K-major (``_k_major``) when the other operand's extent is at least
# this: the copy moves 8 bytes per element of the operand once, against a GEMM of
# 2*M*N*K FLOPs at 3xTF32's rate; at 512 rows it costs under a tenth of the GEMM's time
K_MAJOR_MIN = 512


def _k_major(t: torch.Tensor, k_dim: int, other: int) -> torch.Tensor:
    """``t`` [batch, rows, cols] with its ``k_dim`` (1 or 2) the contiguous one, copied so
    where it is not and ``other`` (the extent of the operand it multiplies) is at least
    ``K_MAJOR_MIN``; else as it is. The TF32 ``wgmma`` of a Hopper GPU takes its shared
    memory operands K-major only (the PTX ISA lets 16-bit types alone be transposed), so
    Triton lowers a ``tl.dot`` with an MN-major fp32 operand to a slower path: KernelBench
    ``1_Square``'s ``A @ B`` (B [K, N] row-major) ran at 3.29 ms where
    ``12_Gemm``'s ``x @ W.t()`` (K-major), the same FLOPs, ran at 1.85 ms on an H100
    (benchmarks/results/2026-12-06-h100-s23). Not covered: small GEMMs (``other`` below
    the threshold), where the copy would cost more than the slower path; that the copy
    pays on every GPU (measured on none yet: the H100 figures above are the reason)."""
    if t.stride(k_dim) == 1 or other < K_MAJOR_MIN or t.shape[k_dim] < 2:
        return t
    return t.transpose(1, 2).contiguous().transpose(1, 2) if k_dim == 1 else t.contiguous()


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


def _program(activation: str | None, epilogue: tuple | list) -> list[tuple[int, float]]:
    try:
        steps = [*_ACTS[activation], *epilogue]
    except KeyError:
        names = ", ".join(repr(k) for k in _ACTS if k)
        raise ValueError(f"matmul_f32x3: unknown activation {activation!r}; use one of "
                         f"{names} or None") from None
    if len(steps) > MAX_STEPS:
        raise ValueError(f"matmul_f32x3: {len(steps)} epilogue steps; at most {MAX_STEPS}")
    out = []
    for step in steps:
        name, value = (step, 0.0) if isinstance(step, str) else step
        if name not in STEPS or name == "none":
            raise ValueError(f"matmul_f32x3: unknown epilogue step {name!r}; use one of "
                             f"{', '.join(k for k in STEPS if k != 'none')}")
        out.append((STEPS[name], float(value if value is not None else 0.0)))
    if sum(code == STEPS["residual"] for code, _ in out) > 1:
        raise ValueError("matmul_f32x3: one residual step at most")
    return out + [(0, 0.0)] * (MAX_STEPS - len(out))


def matmul_f32x3(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None,
                 activation: str | None = None, *, epilogue: tuple | list = (),
                 residual: torch.Tensor | None = None, precision: str = "tf32x3",
                 split_k: int | None = None) -> torch.Tensor:
    """``a @ b + bias``, then ``activation``, then each ``epilogue`` step in order, in fp32
    at fp32 accuracy (see the module docstring). A step is a name of ``STEPS`` or a
    ``(name, number)`` pair: ``("add", c)`` is ``x + c``, ``("mul", c)`` ``x * c``,
    ``("rsub", c)`` ``c - x``, ``("div", c)`` ``x / c``, ``("leaky_relu", slope)``,
    ``("clamp_min", lo)``, ``("clamp_max", hi)``, ``"residual"`` adds ``residual`` (the
    output's shape, any strides); at most ``MAX_STEPS`` with the activation. ``precision``
    is ``tl.dot``'s ``input_precision``: ``"tf32x3"``, or ``"ieee"`` for the same kernel on
    the SIMT units (a comparison point for probes). ``split_k``: the runs K is cut into
    (default: ``_split_k``'s choice); with more than one, each run's partial product goes
    to an fp32 workspace, the runs are summed in fp32 and the bias and epilogue applied
    after, in PyTorch."""
    _check(a, b, bias)
    program = _program(activation, epilogue)
    k, n = b.shape[-2], b.shape[-1]
    lead = a.shape[:-1]
    if any(code == STEPS["residual"] for code, _ in program):
        if residual is None or tuple(residual.shape) != (*lead, n) or \
                residual.dtype != torch.float32:
            raise ValueError(f"matmul_f32x3: a residual step needs a float32 residual of "
                             f"shape {(*lead, n)}; got "
                             f"{None if residual is None else tuple(residual.shape)}")
    rows = a.shape[:-2].numel() * a.shape[-2]
    if b.dim() == 2:
        a3 = a.reshape(1, rows, k)  # a view when the leading dims fold, else a copy
        b3 = b.unsqueeze(0)
        r3 = residual.reshape(1, rows, n) if residual is not None else None
    else:  # batch dims folded into one (views where the strides allow)
        batch = a.shape[:-2].numel()
        a3, b3 = a.reshape(batch, *a.shape[-2:]), b.reshape(batch, *b.shape[-2:])
        r3 = residual.reshape(batch, a.shape[-2], n) if residual is not None else None
    batches, m = a3.shape[0], a3.shape[1]
    a3, b3 = _k_major(a3, 2, n), _k_major(b3, 1, m)
    if not batches * m * n:
        return torch.empty((*lead, n), dtype=torch.float32, device=a.device)
    split = _split_k(m, n, k, batches) if split_k is None else int(split_k)
    if split < 1:
        raise ValueError(f"matmul_f32x3: split_k={split_k}; use a count of at least 1")
    if k == 0:  # no tile to run the epilogue in
        c = torch.zeros((batches, m, n), dtype=torch.float32, device=a.device)
        return _reference_epilogue(c + (bias if bias is not None else 0), program,
                                   r3).view(*lead, n)
    if split > 1:  # partial products, summed and finished here
        ws = torch.empty((split, batches, m, n), dtype=torch.float32, device=a.device)
        _launch(a3, b3, None, None, ws, b.dim() > 2, split, precision, [(0, 0.0)] * MAX_STEPS)
        c = ws.sum(0)
        if bias is not None:
            c += bias
        return _reference_epilogue(c, program, r3).view(*lead, n)
    if r3 is not None and 256 * max(r3.stride()[1:]) >= 2**31:
        r3 = r3.contiguous()  # the kernel's offsets within a tile are 32-bit
    c = torch.empty((1, batches, m, n), dtype=torch.float32, device=a.device)
    if bias is not None:
        bias = bias.contiguous()  # the kernel reads it at unit stride
    _launch(a3, b3, bias, r3, c, b.dim() > 2, 1, precision, program)
    return c[0].view(*lead, n)


def _launch(a3: torch.Tensor, b3: torch.Tensor, bias: torch.Tensor | None,
            r3: torch.Tensor | None, out: torch.Tensor, batched_b: bool, split: int,
            precision: str, program: list[tuple[int, float]]) -> None:
    """One launch of ``_mm_kernel``: ``out`` [split, batches, M, N] gets each split's
    product of ``a3`` [batches, M, K] and ``b3`` [batches or 1, K, N], with the bias and
    the epilogue ``program`` applied in the kernel (a split launch passes none)."""
    batches, m, k = a3.shape
    n = b3.shape[-1]
    c = out[0]
    r = r3 if r3 is not None else c
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),
                         batches, split)
    (op1, c1), (op2, c2), (op3, c3), (op4, c4) = program
    _mm_kernel[grid](a3, b3, bias if bias is not None else c, r, out, m, n, k, split,
                     a3.stride(0), a3.stride(1), a3.stride(2),
                     b3.stride(0) if batched_b else 0, b3.stride(1), b3.stride(2),
                     r.stride(0) if r3 is not None and r3.shape[0] > 1 else 0,
                     r.stride(1), r.stride(2),
                     out.stride(0), c.stride(0), c.stride(1), c.stride(2), c1, c2, c3, c4,
                     HAS_BIAS=bias is not None, OP1=op1, OP2=op2, OP3=op3, OP4=op4,
                     PRECISION=precision)


def linear_f32x3(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 activation: str | None = None, *, epilogue: tuple | list = (),
                 residual: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` and its epilogue: :func:`matmul_f32x3` with the [N, K]
    weight read in place as its transpose."""
    if weight.dim() != 2:
        raise ValueError(f"linear_f32x3: weight has shape {tuple(weight.shape)}; expected "
                         "[out_features, in_features]")
    return matmul_f32x3(x, weight.t(), bias, activation, epilogue=epilogue, residual=residual)


def _reference_epilogue(x: torch.Tensor, program: list[tuple[int, float]],
                        residual: torch.Tensor | None) -> torch.Tensor:
    """The epilogue in PyTorch, for an empty K (no tile to run it on)."""
    F = torch.nn.functional
    fns = {1: F.gelu, 2: lambda t: F.gelu(t, approximate="tanh"), 3: F.silu, 4: torch.relu,
           10: torch.sigmoid, 11: torch.tanh}
    for code, v in program:
        if code in fns:
            x = fns[code](x)
        elif code:
            x = {5: lambda t: t + v, 6: lambda t: t * v, 7: lambda t: v - t,
                 8: lambda t: t / v, 9: lambda t: F.leaky_relu(t, v),
                 12: lambda t: t.clamp_min(v), 13: lambda t: t.clamp_max(v),
                 14: lambda t: t + residual}[code](x)
    return x


__all__ = ["linear_f32x3", "matmul_f32x3"]
