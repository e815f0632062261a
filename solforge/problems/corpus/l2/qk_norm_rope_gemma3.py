"""Gemma 3's query/key path (HF Gemma3Attention): QK-norm with Gemma's RMSNorm, whose weight
is an offset from 1 and multiplies in fp32 (y = norm(x) * (1 + w)), then rotary embedding at
the global layers' theta 1e6; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "qk_norm_rope_gemma3",
    "category": "L2",
    "models": ["Gemma 3 27B", "Gemma 3 4B", "Gemma 3 12B"],
    "family": "Gemma 3",
    "shapes_from": "config.json of google/gemma-3-27b-pt (text_config: 32 heads, 16 kv heads, "
                   "head_dim 128, rope_theta 1000000), gemma-3-4b-pt (8 heads, 4 kv heads, "
                   "head_dim 256) and gemma-3-12b-pt (16 heads, 8 kv heads, head_dim 256)",
    "precision": "bf16",
    "description": "q (tokens, heads, d), k (tokens, kv_heads, d): each head vector normalized in "
                   "fp32, times (1 + w), cast to bf16, then rotated (halves, NeoX style) by "
                   "positions[t] * 1e6^(-2i/d).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "heads": 4, "kv_heads": 2, "head_dim": 32},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "heads": 2, "kv_heads": 1, "head_dim": 48},
         "cpu": True, "visible": False},
        {"name": "decode_b32_27b", "params": {"tokens": 32, "heads": 32, "kv_heads": 16,
                                              "head_dim": 128}},
        {"name": "prefill_8k_27b", "params": {"tokens": 8192, "heads": 32, "kv_heads": 16,
                                              "head_dim": 128}},
        {"name": "prefill_4k_4b", "params": {"tokens": 4096, "heads": 8, "kv_heads": 4,
                                             "head_dim": 256}, "visible": False},
        {"name": "decode_b8_12b", "params": {"tokens": 8, "heads": 16, "kv_heads": 8,
                                             "head_dim": 256}, "visible": False},
    ],
    "flops": lambda p: 8 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"],
    "bytes": lambda p: 2 * 2 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"]
    + 8 * p["tokens"],
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, head_dim: int = 128, theta: float = 1e6, eps: float = 1e-6,
                 dtype=torch.bfloat16):
        super().__init__()
        self.q_norm = nn.Parameter((0.1 * torch.randn(head_dim)).to(dtype))
        self.k_norm = nn.Parameter((0.1 * torch.randn(head_dim)).to(dtype))
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv)
        self.eps = eps

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + w.float())).to(x.dtype)

    def forward(self, q, k, positions):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(q.dtype)[:, None, :], emb.sin().to(q.dtype)[:, None, :]
        q, k = self._norm(q, self.q_norm), self._norm(k, self.k_norm)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def get_inputs(tokens: int = 32, heads: int = 32, kv_heads: int = 16, head_dim: int = 128,
               dtype=torch.bfloat16):
    q = gen.randn(tokens, heads, head_dim, dtype=dtype, scale=2.0)
    k = gen.randn(tokens, kv_heads, head_dim, dtype=dtype, scale=2.0)
    return [q, k, gen.indices(131072, tokens)]


def get_init_inputs(head_dim: int = 128, dtype=torch.bfloat16):
    return [head_dim, 1e6, 1e-6, dtype]
