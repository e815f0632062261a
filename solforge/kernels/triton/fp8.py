"""FP8 e4m3 (``float8_e4m3fn``, max 448) quantization with scales, and dequantization.

Three scale granularities, each with the formula of the code it reproduces:

- per tensor (vLLM ``scaled_fp8_quant``): ``s = amax / 448``, ``q = x * (1 / s)``, or a
  given static scale;
- per token group, 1 x G (DeepSeek-V3 ``act_quant``, vLLM ``per_token_group_quant_fp8``):
  ``s = max(amax, eps) / 448`` per G columns of a row, ``q = x / s``;
- per block, B x B (DeepGEMM ``per_block_cast_to_fp8``, weights): ``s = max(amax, eps) / 448``,
  ``q = x * (448 / max(amax, eps))``.

Divisions are rounded as eager PyTorch rounds them, since a tie can flip an fp8 value:
``tensor / tensor`` and, on a CPU, ``tensor / number`` are IEEE divisions
(``tl.math.div_rn``), while ``number / tensor`` is ``number * (1 / tensor)`` in PyTorch.
(On CUDA PyTorch also computes ``tensor / number`` as a product with the reciprocal, so a
GPU reference's scales can differ from these in the last bit.)

Every value is clamped to [-448, 448] and cast rounding to nearest even (``cast_rne``; on
a GPU that is one ``cvt.rn.satfinite`` per two values).

Not covered: e5m2 and the fnuz formats; column-major or TMA-aligned scale layouts; UE8M0
(power-of-two) scales; an all-zero tensor's per-tensor scale (0, so q is NaN, as in the
reference).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import as_rows, autotune_configs, cast_rne

FP8 = torch.float8_e4m3fn


@triton.jit
def _to_e4m3(x):
    # NaN stays NaN through the clamp, as torch.clamp keeps it
    x = tl.minimum(tl.maximum(x, -448.0, propagate_nan=tl.PropagateNan.ALL), 448.0,
                   propagate_nan=tl.PropagateNan.ALL)
    return cast_rne(x, tl.float8e4nv)


_FLAT_CONFIGS = autotune_configs(
    [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((1024, 4), (4096, 8), (8192, 8))],
    triton.Config({"BLOCK": 256}, num_warps=4),
)


@triton.autotune(configs=_FLAT_CONFIGS, key=["numel"])
@triton.jit
def _absmax_kernel(x_ptr, amax_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < numel, other=0.0).to(tl.float32)
    # max is order-independent, so the atomic gives the same answer every run
    tl.atomic_max(amax_ptr, tl.max(tl.abs(x), axis=0))


@triton.autotune(configs=_FLAT_CONFIGS, key=["numel"])
@triton.jit
def _quant_tensor_kernel(x_ptr, q_ptr, amax_ptr, scale_ptr, numel,
                         DYNAMIC: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if DYNAMIC:
        scale = tl.math.div_rn(tl.load(amax_ptr), 448.0)
        if pid == 0:
            tl.store(scale_ptr, scale)
    else:
        scale = tl.load(scale_ptr).to(tl.float32)
    inv = tl.math.div_rn(1.0, scale)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(q_ptr + offs, _to_e4m3(x * inv), mask=mask)


def fp8_quant_per_tensor(x: torch.Tensor, scale: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: ``x`` as e4m3 with one fp32 scale, shaped [1]; dynamic
    (``amax / 448``) unless a static ``scale`` is given."""
    flat = x.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    q = torch.empty(x.shape, dtype=FP8, device=x.device)
    n = flat.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    if scale is None:
        amax = torch.zeros(1, dtype=torch.float32, device=x.device)
        out_scale = torch.empty(1, dtype=torch.float32, device=x.device)
        if n:
            _absmax_kernel[grid](flat, amax, n)
            _quant_tensor_kernel[grid](flat, q, amax, out_scale, n, DYNAMIC=True)
        return q, out_scale
    if scale.numel() != 1:
        raise ValueError(f"a per-tensor scale has one element, got {scale.numel()}")
    if n:
        _quant_tensor_kernel[grid](flat, q, scale, scale, n, DYNAMIC=False)
    return q, scale.reshape(1)


_GROUP_CONFIGS = autotune_configs(
    [triton.Config({"ROWS": r}, num_warps=w) for r, w in ((1, 1), (4, 4), (8, 4), (16, 8))],
    triton.Config({"ROWS": 4}, num_warps=4),
)


@triton.autotune(configs=_GROUP_CONFIGS, key=["N", "GROUP"])
@triton.jit
def _quant_group_kernel(x_ptr, q_ptr, s_ptr, M, N, eps, stride_x, stride_q, stride_s,
                        GROUP: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    g = tl.program_id(1)
    cols = g * GROUP + tl.arange(0, GROUP)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    rows64 = rows.to(tl.int64)[:, None]
    x = tl.load(x_ptr + rows64 * stride_x + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), eps)
    scale = tl.math.div_rn(amax, 448.0)
    q = _to_e4m3(tl.math.div_rn(x, scale[:, None]))
    tl.store(q_ptr + rows64 * stride_q + cols[None, :], q, mask=mask)
    tl.store(s_ptr + rows.to(tl.int64) * stride_s + g, scale, mask=rows < M)


def fp8_quant_per_group(x: torch.Tensor, group_size: int = 128, eps: float = 1e-10
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scales)``: each row of ``x`` in groups of ``group_size`` columns (a power of
    two), one fp32 scale per group; scales are [*x.shape[:-1], ceil(N / group_size)],
    row-major. A last, shorter group (N not a multiple) gets its own scale."""
    if group_size & (group_size - 1):
        raise ValueError(f"group_size must be a power of two, got {group_size}")
    n = x.shape[-1]
    rows = as_rows(x)
    m = rows.shape[0]
    groups = triton.cdiv(n, group_size)
    q = torch.empty(rows.shape, dtype=FP8, device=x.device)
    s = torch.empty((m, groups), dtype=torch.float32, device=x.device)
    if rows.numel():
        grid = lambda meta: (triton.cdiv(m, meta["ROWS"]), groups)
        _quant_group_kernel[grid](rows, q, s, m, n, eps, rows.stride(0), q.stride(0),
                                  s.stride(0), GROUP=group_size)
    return q.view(x.shape), s.view(*x.shape[:-1], groups)


_BLOCK_CONFIGS = autotune_configs(
    [triton.Config({}, num_warps=w) for w in (4, 8, 16)],
    triton.Config({}, num_warps=4),
)


@triton.autotune(configs=_BLOCK_CONFIGS, key=["N", "BLOCK"])
@triton.jit
def _quant_block_kernel(x_ptr, q_ptr, s_ptr, M, N, eps, stride_x, stride_q, stride_s,
                        BLOCK: tl.constexpr):
    bm, bn = tl.program_id(0), tl.program_id(1)
    rows = (bm * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)[:, None]
    cols = bn * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = (rows < M) & (cols < N)
    x = tl.load(x_ptr + rows * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.max(tl.abs(x), axis=1), axis=0), eps)
    q = _to_e4m3(x * (448.0 * tl.math.div_rn(1.0, amax)))
    tl.store(q_ptr + rows * stride_q + cols, q, mask=mask)
    tl.store(s_ptr + bm * stride_s + bn, tl.math.div_rn(amax, 448.0))


def fp8_quant_per_block(x: torch.Tensor, block: int = 128, eps: float = 1e-4
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scales)``: a 2-D ``x`` [M, N] (a weight) with one fp32 scale per ``block`` x
    ``block`` tile (a power of two); scales are [ceil(M / block), ceil(N / block)], edge
    tiles scaled by the amax of their real elements (DeepGEMM pads them with zeros)."""
    if x.dim() != 2:
        raise ValueError(f"per-block quantization takes a 2-D weight, got {x.dim()}-D")
    if block & (block - 1):
        raise ValueError(f"block must be a power of two, got {block}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    m, n = x.shape
    q = torch.empty((m, n), dtype=FP8, device=x.device)
    s = torch.empty((triton.cdiv(m, block), triton.cdiv(n, block)), dtype=torch.float32,
                    device=x.device)
    if x.numel():
        _quant_block_kernel[s.shape](x, q, s, m, n, eps, x.stride(0), q.stride(0), s.stride(0),
                                     BLOCK=block)
    return q, s


_DEQUANT_CONFIGS = autotune_configs(
    [triton.Config({"TILE_M": tm, "TILE_N": tn}, num_warps=w)
     for tm, tn, w in ((16, 128, 4), (32, 128, 4), (32, 256, 8), (64, 256, 8))],
    triton.Config({"TILE_M": 16, "TILE_N": 64}, num_warps=4),
)


@triton.autotune(configs=_DEQUANT_CONFIGS, key=["N"])
@triton.jit
def _dequant_kernel(q_ptr, s_ptr, y_ptr, M, N, block_m, block_n,
                    stride_q, stride_sm, stride_sn, stride_y,
                    TILE_M: tl.constexpr, TILE_N: tl.constexpr):
    rows = tl.program_id(0) * TILE_M + tl.arange(0, TILE_M)
    cols = tl.program_id(1) * TILE_N + tl.arange(0, TILE_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    # one division per row and per column of the tile, not per element
    s_offs = (rows // block_m)[:, None] * stride_sm + (cols // block_n)[None, :] * stride_sn
    s = tl.load(s_ptr + s_offs, mask=mask, other=0.0).to(tl.float32)
    rows64 = rows.to(tl.int64)[:, None]
    q = tl.load(q_ptr + rows64 * stride_q + cols[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rows64 * stride_y + cols[None, :],
             cast_rne(q.to(tl.float32) * s, y_ptr.dtype.element_ty), mask=mask)


def fp8_dequant(q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] | None = (128, 128),
                out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``q.float() * scale`` broadcast over ``block`` tiles, rounded once to ``out_dtype``.

    ``q`` is [M, N] (e4m3 or any dtype); ``scale`` is [ceil(M / bm), ceil(N / bn)] for
    ``block=(bm, bn)``: (128, 128) for DeepSeek weights, (1, 128) for token groups; with
    ``block=None`` it is one per-tensor scale.
    """
    if q.dim() != 2:
        raise ValueError(f"dequantization takes a 2-D q, got {q.dim()}-D")
    if q.stride(-1) != 1:
        q = q.contiguous()
    m, n = q.shape
    if block is None:
        if scale.numel() != 1:
            raise ValueError(f"block=None means one per-tensor scale, got {scale.numel()}")
        bm, bn, s_strides = max(m, 1), max(n, 1), (0, 0)
    else:
        bm, bn = block
        want = (triton.cdiv(m, bm), triton.cdiv(n, bn))
        if tuple(scale.shape) != want:
            raise ValueError(f"scales of shape {tuple(scale.shape)}; {block} blocks of a "
                             f"[{m}, {n}] tensor need {want}")
        s_strides = scale.stride()
    y = torch.empty((m, n), dtype=out_dtype, device=q.device)
    if q.numel():
        grid = lambda meta: (triton.cdiv(m, meta["TILE_M"]), triton.cdiv(n, meta["TILE_N"]))
        _dequant_kernel[grid](q, scale, y, m, n, bm, bn, q.stride(0), *s_strides, y.stride(0))
    return y
