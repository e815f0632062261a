"""Qwen3's query/key path (HF Qwen3Attention): a per-head RMSNorm over head_dim on q and k
(QK-norm, eps 1e-6, weights of length head_dim), then rotary embedding (rotate_half, theta
1e6) at each token's position; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "qk_norm_rope_qwen3",
    "category": "L2",
    "models": ["Qwen3 8B", "Qwen3 32B", "Qwen3 0.6B"],
    "family": "Qwen3",
    "shapes_from": "config.json of Qwen/Qwen3-8B (32 heads, 8 kv heads, head_dim 128, "
                   "rope_theta 1000000, rms_norm_eps 1e-6), Qwen3-32B (64 heads, 8 kv heads) "
                   "and Qwen3-0.6B (16 heads, 8 kv heads)",
    "precision": "bf16",
    "description": "q (tokens, heads, d) and k (tokens, kv_heads, d): each head vector RMS-normed "
                   "in fp32 and scaled by q_norm / k_norm weights, cast to bf16, then rotated by "
                   "cos/sin of positions[t] * theta^(-2i/d) (halves rotated, NeoX style).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "heads": 4, "kv_heads": 2, "head_dim": 32},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 11, "heads": 3, "kv_heads": 1, "head_dim": 16},
         "cpu": True, "visible": False},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "heads": 32, "kv_heads": 8,
                                             "head_dim": 128}},
        {"name": "prefill_4k_8b", "params": {"tokens": 4096, "heads": 32, "kv_heads": 8,
                                             "head_dim": 128}},
        {"name": "prefill_8k_32b", "params": {"tokens": 8192, "heads": 64, "kv_heads": 8,
                                              "head_dim": 128}, "visible": False},
        {"name": "decode_b1_0p6b", "params": {"tokens": 1, "heads": 16, "kv_heads": 8,
                                              "head_dim": 128}, "visible": False},
    ],
    # norm ~4 per element, rotation ~3 per element
    "flops": lambda p: 7 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"],
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
        self.q_norm = nn.Parameter((1 + 0.1 * torch.randn(head_dim)).to(dtype))
        self.k_norm = nn.Parameter((1 + 0.1 * torch.randn(head_dim)).to(dtype))
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv)
        self.eps = eps

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    def forward(self, q, k, positions):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(q.dtype)[:, None, :], emb.sin().to(q.dtype)[:, None, :]
        q, k = self._norm(q, self.q_norm), self._norm(k, self.k_norm)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def get_inputs(tokens: int = 64, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
               dtype=torch.bfloat16):
    q = gen.randn(tokens, heads, head_dim, dtype=dtype, scale=2.0)
    k = gen.randn(tokens, kv_heads, head_dim, dtype=dtype, scale=2.0)
    return [q, k, gen.indices(32768, tokens)]


def get_init_inputs(head_dim: int = 128, dtype=torch.bfloat16):
    return [head_dim, 1e6, 1e-6, dtype]
