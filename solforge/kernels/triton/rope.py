"""Rotary position embedding, rotate-half (GPT-NeoX) form, as Llama, Qwen, Mistral use it.

``out = x * cos + rotate_half(x) * sin`` on the last dim of q and k, one launch for both.
cos/sin come either as per-token tables (HF: ``[batch, seq, head_dim]`` from the rotary
module; :func:`rope_cos_sin` builds them from positions) or as a cache indexed by
``positions`` (vLLM: ``cos_sin_cache[positions]``). A table of width ``head_dim // 2``
serves both halves; a full-width one is read half by half, so any table works.

Rounding follows the eager code: each product is rounded to ``x``'s dtype, then their sum.
An optional per-channel bias (Qwen's q/k projection bias) is added first, rounded as a
separate ``x + bias`` would be.

Not covered: partial rotary (``rotary_dim < head_dim``); the interleaved (GPT-J) form;
YaRN/longrope attention scaling of cos/sin (fold it into the tables); writing in place.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solforge.kernels.triton._common import autotune_configs, cast_rne

_CONFIGS = autotune_configs(
    [triton.Config({"BLOCK_H": h}, num_warps=w) for h, w in ((1, 1), (2, 2), (4, 4), (8, 4))],
    triton.Config({"BLOCK_H": 4}, num_warps=1),
)


@triton.jit
def _rotate_heads(x_ptr, o_ptr, bias_ptr, b, s, head0, H,
                  sxb, sxh, sxs, sob, soh, sos, c1, c2, s1, s2, HALF,
                  HAS_BIAS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    heads = head0 + tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_HALF)
    mask = (heads[:, None] < H) & (d[None, :] < HALF)
    h64 = heads.to(tl.int64)[:, None]  # heads * a long sequence's head stride passes 2^31
    x_base = x_ptr + b * sxb + s * sxs + h64 * sxh + d[None, :]
    x1 = tl.load(x_base, mask=mask, other=0.0)
    x2 = tl.load(x_base + HALF, mask=mask, other=0.0)
    dt = x1.dtype
    if HAS_BIAS:
        b_base = bias_ptr + heads[:, None] * (2 * HALF) + d[None, :]
        b1 = tl.load(b_base, mask=mask, other=0.0).to(tl.float32)
        b2 = tl.load(b_base + HALF, mask=mask, other=0.0).to(tl.float32)
        x1 = cast_rne(x1.to(tl.float32) + b1, dt)
        x2 = cast_rne(x2.to(tl.float32) + b2, dt)
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    o1 = cast_rne(x1 * c1, dt).to(tl.float32) - cast_rne(x2 * s1, dt).to(tl.float32)
    o2 = cast_rne(x2 * c2, dt).to(tl.float32) + cast_rne(x1 * s2, dt).to(tl.float32)
    o_base = o_ptr + b * sob + s * sos + h64 * soh + d[None, :]
    tl.store(o_base, cast_rne(o1, dt), mask=mask)
    tl.store(o_base + HALF, cast_rne(o2, dt), mask=mask)


@triton.autotune(configs=_CONFIGS, key=["HQ", "HK", "HALF"])
@triton.jit
def _rope_kernel(q_ptr, k_ptr, qo_ptr, ko_ptr, qb_ptr, kb_ptr, cos_ptr, sin_ptr, pos_ptr,
                 S, HQ, HK, HALF, second_half,
                 sqb, sqh, sqs, skb, skh, sks, sqob, sqoh, sqos, skob, skoh, skos,
                 s_tab_b, s_tab_s, s_pos_b, s_pos_s,
                 HAS_POS: tl.constexpr, HAS_QBIAS: tl.constexpr, HAS_KBIAS: tl.constexpr,
                 BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    tok = tl.program_id(0)
    b = (tok // S).to(tl.int64)
    s = (tok % S).to(tl.int64)
    if HAS_POS:
        tab = tl.load(pos_ptr + b * s_pos_b + s * s_pos_s).to(tl.int64) * s_tab_s
    else:
        tab = b * s_tab_b + s * s_tab_s
    d = tl.arange(0, BLOCK_HALF)
    dm = d < HALF
    # second_half is 0 for half-width tables, HALF for full-width ones
    c1 = tl.load(cos_ptr + tab + d, mask=dm, other=0.0).to(tl.float32)[None, :]
    s1 = tl.load(sin_ptr + tab + d, mask=dm, other=0.0).to(tl.float32)[None, :]
    c2 = tl.load(cos_ptr + tab + second_half + d, mask=dm, other=0.0).to(tl.float32)[None, :]
    s2 = tl.load(sin_ptr + tab + second_half + d, mask=dm, other=0.0).to(tl.float32)[None, :]
    # axis 1 walks q's head blocks, then k's: one launch rotates both
    q_blocks = tl.cdiv(HQ, BLOCK_H)
    hb = tl.program_id(1)
    if hb < q_blocks:
        _rotate_heads(q_ptr, qo_ptr, qb_ptr, b, s, hb * BLOCK_H, HQ,
                      sqb, sqh, sqs, sqob, sqoh, sqos, c1, c2, s1, s2, HALF,
                      HAS_QBIAS, BLOCK_H, BLOCK_HALF)
    else:
        _rotate_heads(k_ptr, ko_ptr, kb_ptr, b, s, (hb - q_blocks) * BLOCK_H, HK,
                      skb, skh, sks, skob, skoh, skos, c1, c2, s1, s2, HALF,
                      HAS_KBIAS, BLOCK_H, BLOCK_HALF)


def _check_bias(bias: torch.Tensor | None, heads: int, head_dim: int, name: str) -> None:
    if bias is not None and (bias.numel() != heads * head_dim or not bias.is_contiguous()):
        raise ValueError(f"{name} must be a contiguous [{heads} * {head_dim}] vector")


def rotary_embedding(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     positions: torch.Tensor | None = None, *,
                     q_bias: torch.Tensor | None = None, k_bias: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q`` [B, Hq, S, D] and ``k`` [B, Hk, S, D] (HF's layout; any strides, with
    unit stride on D) and return new tensors laid out as the inputs are.

    Tables: without ``positions``, ``cos``/``sin`` are [B, S, Dt] or [S, Dt]; with
    ``positions`` [B, S] (int), they are caches [P, Dt] indexed by position. Dt is D or
    D // 2. vLLM's flat layout, q as [T, Hq * D], is
    ``q.view(1, T, Hq, D).transpose(1, 2)`` with ``positions.view(1, T)``.

    ``q_bias``/``k_bias`` [H * D] are added before the rotation, to ``q``/``k`` as given:
    when those are already-rounded low-precision GEMM outputs, that is one rounding more
    than a GEMM that adds its bias (addmm), and the rotation's cancellation can amplify it
    past a bf16 tolerance on outlier inputs. Keep the bias in the GEMM where it must match.
    """
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError("q and k must be [batch, heads, seq, head_dim]")
    bsz, hq, seq, dim = q.shape
    hk = k.shape[1]
    if k.shape[0] != bsz or k.shape[2] != seq or k.shape[3] != dim or k.dtype != q.dtype:
        raise ValueError(f"k {tuple(k.shape)} {k.dtype} does not match q {tuple(q.shape)} "
                         f"{q.dtype} in batch, seq, head_dim and dtype")
    if dim % 2 or q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError("head_dim must be even and have unit stride in q and k")
    half = dim // 2
    if cos.shape != sin.shape or cos.stride() != sin.stride() or cos.stride(-1) != 1:
        raise ValueError("cos and sin must have one shape and one layout, unit stride last")
    width = cos.shape[-1]
    if width not in (dim, half):
        raise ValueError(f"cos/sin tables have width {width}; expected {dim} or {half}")
    if positions is not None:
        if cos.dim() != 2 or positions.shape != (bsz, seq):
            raise ValueError("with positions, cos/sin are [P, Dt] and positions [B, S]")
        s_tab_b, s_tab_s = 0, cos.stride(0)
        s_pos_b, s_pos_s = positions.stride()
    else:
        if cos.dim() == 2:
            cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)
        if cos.dim() != 3 or cos.shape[1] != seq or cos.shape[0] not in (1, bsz):
            raise ValueError(f"cos/sin of shape {tuple(cos.shape)} do not broadcast to "
                             f"[{bsz}, {seq}, {width}]")
        s_tab_b = cos.stride(0) if cos.shape[0] == bsz else 0
        s_tab_s = cos.stride(1)
        s_pos_b = s_pos_s = 0
    _check_bias(q_bias, hq, dim, "q_bias")
    _check_bias(k_bias, hk, dim, "k_bias")
    # empty_like keeps the input's layout, so a transposed view in gives one out
    qo, ko = torch.empty_like(q), torch.empty_like(k)
    if q.numel() == 0:
        return qo, ko
    grid = lambda meta: (bsz * seq,
                         triton.cdiv(hq, meta["BLOCK_H"]) + triton.cdiv(hk, meta["BLOCK_H"]))
    _rope_kernel[grid](
        q, k, qo, ko, q_bias if q_bias is not None else q, k_bias if k_bias is not None else k,
        cos, sin, positions if positions is not None else cos,
        seq, hq, hk, half, half if width == dim else 0,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        qo.stride(0), qo.stride(1), qo.stride(2), ko.stride(0), ko.stride(1), ko.stride(2),
        s_tab_b, s_tab_s, s_pos_b, s_pos_s,
        HAS_POS=positions is not None, HAS_QBIAS=q_bias is not None,
        HAS_KBIAS=k_bias is not None, BLOCK_HALF=triton.next_power_of_2(half))
    return qo, ko


_TABLE_CONFIGS = autotune_configs(
    [triton.Config({"BLOCK_T": t}, num_warps=w) for t, w in ((4, 2), (16, 4), (32, 4))],
    triton.Config({"BLOCK_T": 4}, num_warps=1),
)


@triton.autotune(configs=_TABLE_CONFIGS, key=["HALF"])
@triton.jit
def _cos_sin_kernel(pos_ptr, inv_freq_ptr, cos_ptr, sin_ptr, T, HALF,
                    BLOCK_T: tl.constexpr, BLOCK_HALF: tl.constexpr):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    d = tl.arange(0, BLOCK_HALF)
    tm = t < T
    dm = d < HALF
    mask = tm[:, None] & dm[None, :]
    pos = tl.load(pos_ptr + t, mask=tm, other=0).to(tl.float32)
    inv_freq = tl.load(inv_freq_ptr + d, mask=dm, other=0.0).to(tl.float32)
    # one fp32 product per angle, as HF's inv_freq @ positions.float() (a K=1 matmul) gives
    angle = pos[:, None] * inv_freq[None, :]
    out = t.to(tl.int64)[:, None] * (2 * HALF) + d[None, :]
    c = cast_rne(tl.cos(angle), cos_ptr.dtype.element_ty)
    s = cast_rne(tl.sin(angle), sin_ptr.dtype.element_ty)
    tl.store(cos_ptr + out, c, mask=mask)
    tl.store(cos_ptr + out + HALF, c, mask=mask)
    tl.store(sin_ptr + out, s, mask=mask)
    tl.store(sin_ptr + out + HALF, s, mask=mask)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's rotary module: ``emb = cat(freqs, freqs)`` with ``freqs = positions * inv_freq``
    in fp32; returns ``(emb.cos(), emb.sin())`` as ``dtype``, shaped ``[*positions.shape,
    2 * len(inv_freq)]``. ``inv_freq`` already carries any frequency scaling (Llama 3's).
    """
    half = inv_freq.numel()
    pos = positions.reshape(-1)
    if not pos.is_contiguous():
        pos = pos.contiguous()
    shape = (*positions.shape, 2 * half)
    cos = torch.empty(shape, dtype=dtype, device=positions.device)
    sin = torch.empty(shape, dtype=dtype, device=positions.device)
    if pos.numel():
        grid = lambda meta: (triton.cdiv(pos.numel(), meta["BLOCK_T"]),)
        _cos_sin_kernel[grid](pos, inv_freq.contiguous(), cos, sin, pos.numel(), half,
                              BLOCK_HALF=triton.next_power_of_2(half))
    return cos, sin
