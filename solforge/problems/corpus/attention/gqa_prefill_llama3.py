"""Causal grouped-query attention for prefill, as Llama 3 runs it (HF sdpa_attention_forward:
repeat the k/v heads, then scaled_dot_product_attention with is_causal), bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "gqa_prefill_llama3",
    "category": "attention",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "softmax(q k^T / sqrt(d) + causal) v with 32 query heads sharing 8 k/v "
                   "heads (Llama 3 8B; 70B at tensor parallelism 8 has 8 and 1); q/k/v are "
                   "(batch, heads, seq, head_dim) after RoPE; output (batch, seq, heads, d).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 17, "heads": 4, "kv_heads": 2,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 31, "heads": 6, "kv_heads": 2,
                                       "head_dim": 32}, "cpu": True, "visible": False},
        {"name": "cpu_single_token", "params": {"batch": 3, "seq": 1, "heads": 4,
                                                "kv_heads": 1, "head_dim": 16}, "cpu": True,
         "visible": False},
        {"name": "prefill_b8_s1024_8b", "params": {"batch": 8, "seq": 1024, "heads": 32,
                                                   "kv_heads": 8, "head_dim": 128}},
        {"name": "prefill_b2_s4096_8b", "params": {"batch": 2, "seq": 4096, "heads": 32,
                                                   "kv_heads": 8, "head_dim": 128}},
        {"name": "prefill_b1_s8192_8b", "params": {"batch": 1, "seq": 8192, "heads": 32,
                                                   "kv_heads": 8, "head_dim": 128},
         "visible": False},
        {"name": "prefill_b1_s8192_70b_tp8", "params": {"batch": 1, "seq": 8192, "heads": 8,
                                                        "kv_heads": 1, "head_dim": 128},
         "visible": False},
    ],
    # QK^T and PV over the unmasked (causal) half only
    "flops": lambda p: 2 * p["batch"] * p["heads"] * p["seq"] * (p["seq"] + 1) * p["head_dim"],
    # q in, o out, k and v once (bf16)
    "bytes": lambda p: 4 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"]),
}


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class Model(nn.Module):
    def __init__(self, heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
        super().__init__()
        self.n_rep = heads // kv_heads
        self.scaling = head_dim ** -0.5

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor):
        key = repeat_kv(key, self.n_rep)
        value = repeat_kv(value, self.n_rep)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                             scale=self.scaling, is_causal=query.shape[2] > 1)
        return out.transpose(1, 2).contiguous()


def get_inputs(batch: int = 1, seq: int = 4096, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
    return [heads, kv_heads, head_dim]
