"""Rotary position embedding of Llama 3 (apply_rotary_pos_emb with rotate_half), given cos/sin.

cos/sin are what LlamaRotaryEmbedding hands the attention layer: built here from real
positions (rope_theta 500000 with the "llama3" frequency scaling), cast to bf16.
"""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rope_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672), "
                   "rope_theta 500000",
    "precision": "bf16",
    "description": "q' = q*cos + rotate_half(q)*sin and the same for k, with q [b, 32|64, s, 128] "
                   "and GQA k [b, 8, s, 128]; cos/sin [b, s, 128] broadcast over heads "
                   "(HF apply_rotary_pos_emb).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 1, "heads": 4, "kv_heads": 2,
                                         "head_dim": 64}, "cpu": True},
        {"name": "decode_b64_8b", "params": {"batch": 64, "seq": 1, "heads": 32, "kv_heads": 8,
                                             "head_dim": 128}},
        {"name": "prefill_4k_8b", "params": {"batch": 1, "seq": 4096, "heads": 32,
                                             "kv_heads": 8, "head_dim": 128}},
        {"name": "prefill_2k_70b", "params": {"batch": 2, "seq": 2048, "heads": 64,
                                              "kv_heads": 8, "head_dim": 128}, "visible": False},
        {"name": "cpu_odd", "params": {"batch": 3, "seq": 37, "heads": 6, "kv_heads": 2,
                                       "head_dim": 128}, "cpu": True, "visible": False},
    ],
    # two products and one add per output element of q and k
    "flops": lambda p: 3 * p["batch"] * p["seq"] * (p["heads"] + p["kv_heads"]) * p["head_dim"],
    # q, k read and written; cos, sin read once (bf16)
    "bytes": lambda p: 2 * (2 * p["batch"] * p["seq"] * (p["heads"] + p["kv_heads"]) * p["head_dim"]
                            + 2 * p["batch"] * p["seq"] * p["head_dim"]),
}


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, cos, sin):
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed


def _llama3_inv_freq(head_dim, theta=500000.0, factor=8.0, low_freq_factor=1.0,
                     high_freq_factor=4.0, old_context_len=8192):
    # HF _compute_llama3_parameters
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def get_inputs(batch: int = 1, seq: int = 4096, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, max_pos: int = 131072, dtype=torch.bfloat16):
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    # each sequence's chunk starts somewhere in its 128k context
    start = gen.indices(max_pos - seq + 1, batch, 1)
    position_ids = start + torch.arange(seq).unsqueeze(0)
    freqs = position_ids[:, :, None].float() * _llama3_inv_freq(head_dim)[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return [q, k, emb.cos().to(dtype), emb.sin().to(dtype)]


def get_init_inputs():
    return []
