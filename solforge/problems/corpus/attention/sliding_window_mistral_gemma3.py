"""Sliding-window causal GQA attention (HF sdpa path with a sliding-window mask), bf16:
Mistral 7B (window 4096) and the local layers of Gemma 3 (window 1024, head_dim 256)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen


def _pairs(p):
    """(query, key) pairs inside the window: sum over i of min(i + 1, window)."""
    s, w = p["seq"], p["window"]
    return s * (s + 1) / 2 if s <= w else w * (w + 1) / 2 + (s - w) * w


SOLFORGE = {
    "name": "sliding_window_mistral_gemma3",
    "category": "attention",
    "models": ["Mistral 7B", "Gemma 3 12B"],
    "family": "Mistral",
    "shapes_from": "config.json of mistralai/Mistral-7B-v0.1 (sliding_window 4096, 32 heads, 8 kv "
                   "heads) and google/gemma-3-12b (sliding_window 1024, 16 heads, 8 kv heads, "
                   "head_dim 256)",
    "precision": "bf16",
    "description": "Query i attends to keys j with i - window < j <= i; k/v heads are shared "
                   "by groups of q heads (Mistral 32/8 x 128, Gemma 3 12B 16/8 x 256); "
                   "scale head_dim^-0.5; output (batch, seq, heads, d).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 37, "window": 8, "heads": 4,
                                         "kv_heads": 2, "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 50, "window": 13, "heads": 4,
                                       "kv_heads": 1, "head_dim": 32}, "cpu": True,
         "visible": False},
        {"name": "mistral7b_b1_s8192", "params": {"batch": 1, "seq": 8192, "window": 4096,
                                                  "heads": 32, "kv_heads": 8,
                                                  "head_dim": 128}},
        {"name": "gemma3_12b_b2_s4096", "params": {"batch": 2, "seq": 4096, "window": 1024,
                                                   "heads": 16, "kv_heads": 8,
                                                   "head_dim": 256}},
        {"name": "mistral7b_b1_s16384", "params": {"batch": 1, "seq": 16384, "window": 4096,
                                                   "heads": 32, "kv_heads": 8,
                                                   "head_dim": 128}, "visible": False},
        {"name": "gemma3_12b_b1_s8192", "params": {"batch": 1, "seq": 8192, "window": 1024,
                                                   "heads": 16, "kv_heads": 8,
                                                   "head_dim": 256}, "visible": False},
    ],
    # QK^T and PV over the pairs inside the window only
    "flops": lambda p: 4 * p["batch"] * p["heads"] * p["head_dim"] * _pairs(p),
    # q in, o out, k and v once (bf16)
    "bytes": lambda p: 4 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"]),
}


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class Model(nn.Module):
    def __init__(self, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                 window: int = 4096):
        super().__init__()
        self.n_rep = heads // kv_heads
        self.scaling = head_dim ** -0.5
        self.window = window

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor):
        seq = query.shape[2]
        q_idx = torch.arange(seq, device=query.device)[:, None]
        kv_idx = torch.arange(seq, device=query.device)[None, :]
        attn_mask = (kv_idx <= q_idx) & (kv_idx > q_idx - self.window)  # True: may attend
        key = repeat_kv(key, self.n_rep)
        value = repeat_kv(value, self.n_rep)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                             dropout_p=0.0, scale=self.scaling)
        return out.transpose(1, 2).contiguous()


def get_inputs(batch: int = 1, seq: int = 8192, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                    window: int = 4096):
    return [heads, kv_heads, head_dim, window]
