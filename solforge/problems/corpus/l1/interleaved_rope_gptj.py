"""GPT-J's rotary embedding (HF GPTJAttention): interleaved pairs (x[2i], x[2i+1]) rotated
(rotate_every_two), on the first rotary_dim = 64 of each head's 256 dims only; q and k in
(batch, seq, heads, head_dim) layout; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "interleaved_rope_gptj",
    "category": "L1",
    "models": ["GPT-J 6B"],
    "family": "GPT-J",
    "shapes_from": "config.json of EleutherAI/gpt-j-6b: n_embd 4096, n_head 16 (head_dim 256), "
                   "rotary_dim 64, n_positions 2048",
    "precision": "fp16",
    "description": "For dims [0, rot): pairs (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin) with "
                   "angle positions * 10000^(-2i/rot) repeated per pair; dims [rot, d) copied.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 5, "heads": 2, "head_dim": 32,
                                         "rot": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 3, "heads": 3, "head_dim": 20,
                                       "rot": 8}, "cpu": True, "visible": False},
        {"name": "decode_b64", "params": {"batch": 64, "seq": 1, "heads": 16, "head_dim": 256,
                                          "rot": 64}},
        {"name": "prefill_b1_s2048", "params": {"batch": 1, "seq": 2048, "heads": 16,
                                                "head_dim": 256, "rot": 64}},
        {"name": "prefill_b8_s1024", "params": {"batch": 8, "seq": 1024, "heads": 16,
                                                "head_dim": 256, "rot": 64}, "visible": False},
    ],
    "flops": lambda p: 2 * 3 * p["batch"] * p["seq"] * p["heads"] * p["rot"],
    "bytes": lambda p: 2 * 2 * 2 * p["batch"] * p["seq"] * p["heads"] * p["head_dim"]
    + 8 * p["batch"] * p["seq"],
}


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class Model(nn.Module):
    def __init__(self, rot: int = 64, base: float = 10000.0):
        super().__init__()
        self.rot = rot
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, rot, 2).float() / rot))

    def forward(self, q, k, positions):
        freqs = positions.float()[..., None] * self.inv_freq  # (batch, seq, rot/2)
        sin = freqs.sin().repeat_interleave(2, dim=-1)[:, :, None].to(q.dtype)
        cos = freqs.cos().repeat_interleave(2, dim=-1)[:, :, None].to(q.dtype)
        out = []
        for t in (q, k):
            t_rot, t_pass = t[..., :self.rot], t[..., self.rot:]
            out.append(torch.cat((t_rot * cos + rotate_every_two(t_rot) * sin, t_pass), dim=-1))
        return tuple(out)


def get_inputs(batch: int = 1, seq: int = 2048, heads: int = 16, head_dim: int = 256,
               dtype=torch.float16):
    q = gen.randn(batch, seq, heads, head_dim, dtype=dtype)
    k = gen.randn(batch, seq, heads, head_dim, dtype=dtype)
    return [q, k, gen.indices(2048, batch, seq)]


def get_init_inputs(rot: int = 64):
    return [rot, 10000.0]
