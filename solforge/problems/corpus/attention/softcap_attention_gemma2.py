"""Gemma 2's attention core (HF Gemma2Attention, eager path): grouped-query attention whose
scores are scaled by query_pre_attn_scalar^-0.5 and soft-capped, cap * tanh(s / cap) with
cap 50, before the causal softmax; bf16 inputs, fp32 scores."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "softcap_attention_gemma2",
    "category": "attention",
    "models": ["Gemma 2 9B", "Gemma 2 27B", "Gemma 2 2B"],
    "family": "Gemma 2",
    "shapes_from": "config.json of google/gemma-2-9b (16 heads, 8 kv heads, head_dim 256, "
                   "query_pre_attn_scalar 256, attn_logit_softcapping 50.0) and gemma-2-27b "
                   "(32 heads, 16 kv heads, head_dim 128, query_pre_attn_scalar 144)",
    "precision": "bf16",
    "description": "o = softmax(causal(50 * tanh(q k^T * scale / 50))) v, q (batch, heads, seq, "
                   "d), "
                   "k and v (batch, kv_heads, seq, d) shared by heads / kv_heads query heads.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 13, "heads": 4, "kv_heads": 2,
                                         "head_dim": 16, "pre_attn_scalar": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 7, "heads": 2, "kv_heads": 1,
                                       "head_dim": 32, "pre_attn_scalar": 24}, "cpu": True,
         "visible": False},
        {"name": "prefill_b1_s4096_9b", "params": {"batch": 1, "seq": 4096, "heads": 16,
                                                   "kv_heads": 8, "head_dim": 256,
                                                   "pre_attn_scalar": 256}},
        {"name": "prefill_b4_s1024_9b", "params": {"batch": 4, "seq": 1024, "heads": 16,
                                                   "kv_heads": 8, "head_dim": 256,
                                                   "pre_attn_scalar": 256}},
        {"name": "prefill_b1_s4096_27b", "params": {"batch": 1, "seq": 4096, "heads": 32,
                                                    "kv_heads": 16, "head_dim": 128,
                                                    "pre_attn_scalar": 144}, "visible": False},
    ],
    # QK^T and PV over the causal half, plus the cap's divide, tanh and multiply
    "flops": lambda p: p["batch"] * p["heads"] * p["seq"] * p["seq"] * (2 * p["head_dim"] + 2),
    "bytes": lambda p: 2 * p["batch"] * p["seq"] * p["head_dim"]
    * (2 * p["heads"] + 2 * p["kv_heads"]),
}


class Model(nn.Module):
    def __init__(self, heads: int = 16, kv_heads: int = 8, pre_attn_scalar: int = 256,
                 softcap: float = 50.0):
        super().__init__()
        self.n_rep = heads // kv_heads
        self.scale = pre_attn_scalar ** -0.5
        self.softcap = softcap

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k = k.repeat_interleave(self.n_rep, dim=1).float()
        v = v.repeat_interleave(self.n_rep, dim=1).float()
        s = q.shape[2]
        scores = torch.matmul(q.float(), k.transpose(-1, -2)) * self.scale
        scores = torch.tanh(scores / self.softcap) * self.softcap
        pos = torch.arange(s, device=q.device)
        causal = pos[None, :] > pos[:, None]
        scores = scores.masked_fill(causal, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v).to(q.dtype)


def get_inputs(batch: int = 1, seq: int = 4096, heads: int = 16, kv_heads: int = 8,
               head_dim: int = 256, dtype=torch.bfloat16):
    # scores of std ~10 so the cap at 50 bends the tails
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=3.0)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.2)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(heads: int = 16, kv_heads: int = 8, pre_attn_scalar: int = 256):
    return [heads, kv_heads, pre_attn_scalar, 50.0]
