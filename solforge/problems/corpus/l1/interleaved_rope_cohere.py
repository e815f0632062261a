"""Cohere Command R's rotary embedding (HF CohereAttention): full-width rotation of
interleaved pairs (x[2i], x[2i+1]), with the frequencies repeat_interleave'd, theta 8e6;
q (tokens, heads, 128) and k (tokens, kv_heads, 128); bf16 with fp32 angles."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "interleaved_rope_cohere",
    "category": "L1",
    "models": ["Command R 35B", "Command R+ 104B"],
    "family": "Cohere Command R",
    "shapes_from": "config.json of CohereForAI/c4ai-command-r-v01 (hidden 8192, 64 heads, 64 kv "
                   "heads, head_dim 128, rope_theta 8000000) and c4ai-command-r-plus (hidden "
                   "12288, 96 heads, 8 kv heads)",
    "precision": "bf16",
    "description": "Each pair (x0, x1) of q and k rotated by positions[t] * 8e6^(-2i/d): "
                   "(x0 cos - x1 sin, x1 cos + x0 sin), computed in fp32 and cast to bf16.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 4, "heads": 4, "kv_heads": 2, "head_dim": 16},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 9, "heads": 3, "kv_heads": 1, "head_dim": 8},
         "cpu": True, "visible": False},
        {"name": "decode_b64_35b", "params": {"tokens": 64, "heads": 64, "kv_heads": 64,
                                              "head_dim": 128}},
        {"name": "prefill_8k_plus", "params": {"tokens": 8192, "heads": 96, "kv_heads": 8,
                                               "head_dim": 128}},
        {"name": "prefill_4k_35b", "params": {"tokens": 4096, "heads": 64, "kv_heads": 64,
                                              "head_dim": 128}, "visible": False},
    ],
    "flops": lambda p: 3 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"],
    "bytes": lambda p: 2 * 2 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"]
    + 8 * p["tokens"],
}


def rotate_half_interleaved(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


class Model(nn.Module):
    def __init__(self, head_dim: int = 128, theta: float = 8e6):
        super().__init__()
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv)

    def forward(self, q, k, positions):
        freqs = positions.float()[:, None] * self.inv_freq
        emb = freqs.repeat_interleave(2, dim=-1)[:, None]
        cos, sin = emb.cos(), emb.sin()
        qf, kf = q.float(), k.float()
        q_out = qf * cos + rotate_half_interleaved(qf) * sin
        k_out = kf * cos + rotate_half_interleaved(kf) * sin
        return q_out.to(q.dtype), k_out.to(k.dtype)


def get_inputs(tokens: int = 64, heads: int = 64, kv_heads: int = 8, head_dim: int = 128,
               dtype=torch.bfloat16):
    q = gen.randn(tokens, heads, head_dim, dtype=dtype)
    k = gen.randn(tokens, kv_heads, head_dim, dtype=dtype)
    return [q, k, gen.indices(131072, tokens)]


def get_init_inputs(head_dim: int = 128):
    return [head_dim, 8e6]
