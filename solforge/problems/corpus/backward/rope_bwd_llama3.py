"""Rotary position embedding backward as Llama 3 applies it (rotate_half over head_dim 128, rope
theta 500000; q with 32 heads, k with 8): dq and dk from the rotated outputs' gradients; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rope_bwd_llama3",
    "category": "L1",
    "direction": "backward",
    "family": "Llama 3",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "shapes_from": "meta-llama/Meta-Llama-3-8B config.json: num_attention_heads 32, "
                   "num_key_value_heads 8, head_dim 128, rope_theta 500000 (without Llama 3.1's "
                   "frequency rescaling); 70B at tensor parallelism 8: 8 and 1 heads",
    "precision": "bf16_grad",
    "description": "Backward of q' = q cos + rotate_half(q) sin (and k' alike), rotate_half(x) = "
                   "cat(-x2, x1): inputs grad_q' (B, H, S, D), grad_k' (B, KV, S, D) and the "
                   "fp32 cos and sin (S, D); returns dq = g cos + R^T(g sin), R^T(z) = cat(z2, "
                   "-z1), and dk alike (fp32 math, bf16 results).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 9, "heads": 4, "kv_heads": 2,
                                         "head_dim": 16}, "cpu": True},
        {"name": "train_b4_s2048_8b", "params": {"batch": 4, "seq": 2048, "heads": 32,
                                                 "kv_heads": 8, "head_dim": 128}},
        {"name": "train_b2_s8192_8b", "params": {"batch": 2, "seq": 8192, "heads": 32,
                                                 "kv_heads": 8, "head_dim": 128}},
        {"name": "train_b2_s8192_70b_tp8", "params": {"batch": 2, "seq": 8192, "heads": 8,
                                                      "kv_heads": 1, "head_dim": 128},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 13, "heads": 6, "kv_heads": 3,
                                       "head_dim": 32}, "cpu": True, "visible": False},
    ],
    # per element: two products and an add
    "flops": lambda p: 3 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"]),
    # gradients read and written (bf16), cos and sin read (fp32)
    "bytes": lambda p: 4 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"])
    + 8 * p["seq"] * p["head_dim"],
}

THETA = 500000.0


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_half_t(z):
    """The transpose of rotate_half (a rotation by -90 degrees in each pair of halves)."""
    z1, z2 = z.chunk(2, dim=-1)
    return torch.cat((z2, -z1), dim=-1)


class Model(nn.Module):
    def forward(self, grad_q, grad_k, cos, sin):
        def back(g):
            gf = g.float()
            return (gf * cos + rotate_half_t(gf * sin)).to(g.dtype)
        return back(grad_q), back(grad_k)


def autograd_forward(model, grad_q, grad_k, cos, sin):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    q = torch.zeros(grad_q.shape, dtype=grad_q.dtype)
    k = torch.zeros(grad_k.shape, dtype=grad_k.dtype)

    def fn(q, k):
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    return fn, [q, k], [grad_q, grad_k]


def get_inputs(batch: int = 2, seq: int = 8192, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, dtype=torch.bfloat16):
    inv_freq = 1.0 / THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return [gen.randn(batch, heads, seq, head_dim, dtype=dtype),
            gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype), emb.cos(), emb.sin()]


def get_init_inputs():
    return []
