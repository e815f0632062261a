"""DeepSeek-V3's decoupled RoPE backward: the 64 rotary dims of each of 128 query heads and the
one shared rotary key (MLA's k_pe), rotated in interleaved pairs (x[2i], x[2i+1]); bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rope_interleaved_bwd_deepseek_v3",
    "category": "L1",
    "direction": "backward",
    "family": "DeepSeek-V3",
    "models": ["DeepSeek-V3"],
    "shapes_from": "deepseek-ai/DeepSeek-V3 config.json: num_attention_heads 128, "
                   "qk_rope_head_dim 64, rope_theta 10000 (YaRN's rescaled frequencies left "
                   "out); at tensor parallelism 8: 16 heads per GPU",
    "precision": "bf16_grad",
    "description": "Backward of the interleaved rotation y[2i] = x[2i] cos_i - x[2i+1] sin_i, "
                   "y[2i+1] = x[2i] sin_i + x[2i+1] cos_i applied to q_pe (B, H, S, 64) and the "
                   "single shared k_pe (B, 1, S, 64): inputs their gradients and fp32 cos, sin "
                   "(S, 32); returns dq_pe, dk_pe (dx[2i] = g0 cos + g1 sin, dx[2i+1] = g1 cos "
                   "- g0 sin).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 7, "heads": 4, "rope_dim": 16},
         "cpu": True},
        {"name": "train_b1_s4096_tp8", "params": {"batch": 1, "seq": 4096, "heads": 16,
                                                  "rope_dim": 64}},
        {"name": "train_b4_s4096_full", "params": {"batch": 4, "seq": 4096, "heads": 128,
                                                   "rope_dim": 64}},
        {"name": "train_b1_s16384_full", "params": {"batch": 1, "seq": 16384, "heads": 128,
                                                    "rope_dim": 64}, "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 11, "heads": 3, "rope_dim": 8},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 3 * p["batch"] * p["seq"] * p["rope_dim"] * (p["heads"] + 1),
    "bytes": lambda p: 4 * p["batch"] * p["seq"] * p["rope_dim"] * (p["heads"] + 1)
    + 4 * p["seq"] * p["rope_dim"],
}

THETA = 10000.0


def _pairs(x):
    return x.unflatten(-1, (-1, 2)).unbind(-1)


class Model(nn.Module):
    def forward(self, grad_q, grad_k, cos, sin):
        def back(g):
            g0, g1 = _pairs(g.float())
            return torch.stack((g0 * cos + g1 * sin, g1 * cos - g0 * sin), -1).flatten(-2).to(
                g.dtype)
        return back(grad_q), back(grad_k)


def autograd_forward(model, grad_q, grad_k, cos, sin):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def rot(x):
        x0, x1 = _pairs(x)
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)
    q = torch.zeros(grad_q.shape, dtype=grad_q.dtype)
    k = torch.zeros(grad_k.shape, dtype=grad_k.dtype)
    return (lambda q, k: (rot(q), rot(k))), [q, k], [grad_q, grad_k]


def get_inputs(batch: int = 1, seq: int = 4096, heads: int = 16, rope_dim: int = 64,
               dtype=torch.bfloat16):
    inv_freq = 1.0 / THETA ** (torch.arange(0, rope_dim, 2, dtype=torch.float32) / rope_dim)
    ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return [gen.randn(batch, heads, seq, rope_dim, dtype=dtype),
            gen.randn(batch, 1, seq, rope_dim, dtype=dtype), ang.cos(), ang.sin()]


def get_init_inputs():
    return []
