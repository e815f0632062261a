"""GLM-4's rotary embedding (HF GlmAttention): partial_rotary_factor 0.5, so the first 64 of
each 128-dim head rotate, as interleaved pairs (x[2i], x[2i+1]) with the cos/sin halves
repeat_interleave'd; the other 64 dims pass through; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "partial_rotary_glm4",
    "category": "L1",
    "models": ["GLM-4 9B"],
    "family": "GLM-4",
    "shapes_from": "config.json of THUDM/glm-4-9b-hf (hidden 4096, 32 heads, 2 kv heads, "
                   "head_dim 128, partial_rotary_factor 0.5, rope_theta 10000)",
    "precision": "bf16",
    "description": "q (batch, heads, seq, 128), k (batch, kv_heads, seq, 128): dims [0, 64) "
                   "rotated pairwise by positions * 10000^(-2i/64), dims [64, 128) copied.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "heads": 4, "kv_heads": 1, "seq": 5,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "heads": 2, "kv_heads": 2, "seq": 3,
                                       "head_dim": 24}, "cpu": True, "visible": False},
        {"name": "decode_b64", "params": {"batch": 64, "heads": 32, "kv_heads": 2, "seq": 1,
                                          "head_dim": 128}},
        {"name": "prefill_b1_s8192", "params": {"batch": 1, "heads": 32, "kv_heads": 2,
                                                "seq": 8192, "head_dim": 128}},
        {"name": "prefill_b4_s2048", "params": {"batch": 4, "heads": 32, "kv_heads": 2,
                                                "seq": 2048, "head_dim": 128}, "visible": False},
    ],
    "flops": lambda p: 3 * p["batch"] * (p["heads"] + p["kv_heads"]) * p["seq"]
    * p["head_dim"] // 2,
    "bytes": lambda p: 2 * 2 * p["batch"] * (p["heads"] + p["kv_heads"]) * p["seq"] * p["head_dim"]
    + 8 * p["batch"] * p["seq"],
}


def rotate_half_interleaved(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class Model(nn.Module):
    def __init__(self, head_dim: int = 128, theta: float = 10000.0):
        super().__init__()
        self.rot = head_dim // 2
        inv = 1.0 / theta ** (torch.arange(0, self.rot, 2, dtype=torch.float32) / self.rot)
        self.register_buffer("inv_freq", inv)

    def forward(self, q, k, positions):
        freqs = positions.float()[..., None] * self.inv_freq  # (batch, seq, rot/2)
        cos = freqs.cos().repeat_interleave(2, dim=-1)[:, None].to(q.dtype)
        sin = freqs.sin().repeat_interleave(2, dim=-1)[:, None].to(q.dtype)
        out = []
        for t in (q, k):
            t_rot, t_pass = t[..., :self.rot], t[..., self.rot:]
            out.append(torch.cat((t_rot * cos + rotate_half_interleaved(t_rot) * sin, t_pass),
                                 dim=-1))
        return tuple(out)


def get_inputs(batch: int = 1, heads: int = 32, kv_heads: int = 2, seq: int = 8192,
               head_dim: int = 128, dtype=torch.bfloat16):
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    return [q, k, gen.indices(131072, batch, seq)]


def get_init_inputs(head_dim: int = 128):
    return [head_dim, 10000.0]
