"""Multi-query causal attention as Falcon 7B runs it (HF FalconAttention, sdpa path): 71 query
heads share one key/value head of dim 64; Falcon 40B uses 8 key/value groups for 128 heads;
bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "mqa_prefill_falcon",
    "category": "attention",
    "models": ["Falcon 7B", "Falcon 40B"],
    "family": "Falcon",
    "shapes_from": "config.json of tiiuae/falcon-7b (hidden_size 4544, n_head 71, multi_query, "
                   "head_dim 64) and tiiuae/falcon-40b (hidden 8192, n_head 128, num_kv_heads 8)",
    "precision": "bf16",
    "description": "Causal softmax(q k^T / 8) v with q (batch, heads, seq, 64) and k, v (batch, "
                   "kv_heads, seq, 64) broadcast over heads / kv_heads query heads each.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 19, "heads": 5, "kv_heads": 1,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 6, "heads": 6, "kv_heads": 2,
                                       "head_dim": 8}, "cpu": True, "visible": False},
        {"name": "prefill_b1_s2048_7b", "params": {"batch": 1, "seq": 2048, "heads": 71,
                                                   "kv_heads": 1, "head_dim": 64}},
        {"name": "prefill_b8_s512_7b", "params": {"batch": 8, "seq": 512, "heads": 71,
                                                  "kv_heads": 1, "head_dim": 64}},
        {"name": "prefill_b1_s2048_40b", "params": {"batch": 1, "seq": 2048, "heads": 128,
                                                    "kv_heads": 8, "head_dim": 64},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["heads"] * p["seq"] * p["seq"] * p["head_dim"],
    "bytes": lambda p: 2 * p["batch"] * p["seq"] * p["head_dim"]
    * (2 * p["heads"] + 2 * p["kv_heads"]),
}


class Model(nn.Module):
    def __init__(self, heads: int = 71, kv_heads: int = 1):
        super().__init__()
        self.n_rep = heads // kv_heads

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, g, s, d = k.shape
        k = k[:, :, None].expand(b, g, self.n_rep, s, d).reshape(b, g * self.n_rep, s, d)
        v = v[:, :, None].expand(b, g, self.n_rep, s, d).reshape(b, g * self.n_rep, s, d)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs(batch: int = 1, seq: int = 2048, heads: int = 71, kv_heads: int = 1,
               head_dim: int = 64, dtype=torch.bfloat16):
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(heads: int = 71, kv_heads: int = 1):
    return [heads, kv_heads]
