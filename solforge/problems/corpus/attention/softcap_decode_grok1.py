"""Grok-1's attention for decode against a full KV cache (xai-org/grok-1 model.py
MultiHeadAttention): scores scaled by attn_output_multiplier 0.08838834764831845 (= 1/sqrt(128))
and soft-capped at 30 (30 * tanh(s / 30)) before the softmax; 48 query heads share 8 kv heads;
bf16 inputs, fp32 scores."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "softcap_decode_grok1",
    "category": "attention",
    "models": ["Grok-1 314B"],
    "family": "Grok-1",
    "shapes_from": "xai-org/grok-1 run.py TransformerConfig: emb_size 6144, num_q_heads 48, "
                   "num_kv_heads 8, key_size 128, sequence_len 8192, attn_output_multiplier "
                   "0.08838834764831845, max_attn_val 30.0",
    "precision": "bf16",
    "description": "q (b, 48, 1, 128), k, v caches (b, 8, S, 128) -> softmax(30 tanh(q k^T * "
                   "0.0884 / 30)) v: (b, 48, 1, 128).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "heads": 6, "kv_heads": 1, "cache": 17,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "heads": 4, "kv_heads": 2, "cache": 9,
                                       "head_dim": 32}, "cpu": True, "visible": False},
        {"name": "decode_b8_s8192", "params": {"batch": 8, "heads": 48, "kv_heads": 8,
                                               "cache": 8192, "head_dim": 128}},
        {"name": "decode_b64_s2048", "params": {"batch": 64, "heads": 48, "kv_heads": 8,
                                                "cache": 2048, "head_dim": 128}},
        {"name": "decode_b32_s8192_tp8", "params": {"batch": 32, "heads": 6, "kv_heads": 1,
                                                    "cache": 8192, "head_dim": 128},
         "visible": False},
    ],
    "flops": lambda p: 4 * p["batch"] * p["heads"] * p["cache"] * p["head_dim"]
    + 3 * p["batch"] * p["heads"] * p["cache"],
    "bytes": lambda p: 2 * p["batch"] * p["head_dim"] * (2 * p["heads"]
                                                         + 2 * p["kv_heads"] * p["cache"]),
}


class Model(nn.Module):
    def __init__(self, heads: int = 48, kv_heads: int = 8, multiplier: float = 0.08838834764831845,
                 cap: float = 30.0):
        super().__init__()
        self.n_rep, self.multiplier, self.cap = heads // kv_heads, multiplier, cap

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k = k.repeat_interleave(self.n_rep, dim=1).float()
        v = v.repeat_interleave(self.n_rep, dim=1).float()
        s = torch.matmul(q.float(), k.transpose(-1, -2)) * self.multiplier
        s = self.cap * torch.tanh(s / self.cap)
        return torch.matmul(torch.softmax(s, dim=-1), v).to(q.dtype)


def get_inputs(batch: int = 8, heads: int = 48, kv_heads: int = 8, cache: int = 8192,
               head_dim: int = 128, dtype=torch.bfloat16):
    # scores of std ~8 so the cap at 30 bends the largest
    q = gen.randn(batch, heads, 1, head_dim, dtype=dtype, scale=3.0)
    k = gen.randn(batch, kv_heads, cache, head_dim, dtype=dtype, scale=3.0)
    v = gen.randn(batch, kv_heads, cache, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(heads: int = 48, kv_heads: int = 8):
    return [heads, kv_heads]
