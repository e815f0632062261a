"""GPT-NeoX / Pythia partial rotary embedding (HF GPTNeoXAttention): only the first
rotary_pct = 25% of each head's dims are rotated (halves rotated, NeoX style, theta 10000);
the rest pass through; fp16 as Pythia checkpoints ship."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "partial_rotary_neox_pythia",
    "category": "L1",
    "models": ["Pythia 6.9B", "Pythia 12B", "GPT-NeoX 20B"],
    "family": "GPT-NeoX/Pythia",
    "shapes_from": "config.json of EleutherAI/pythia-6.9b (hidden 4096, 32 heads, rotary_pct "
                   "0.25 -> 32 of 128 dims), pythia-12b (40 heads of 128) and gpt-neox-20b "
                   "(64 heads of 96, rotary 24 dims)",
    "precision": "fp16",
    "description": "q, k (batch, heads, seq, d): the first rot dims rotated by positions * "
                   "10000^(-2i/rot) with rotate_half; dims rot..d copied.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "heads": 2, "seq": 7, "head_dim": 32,
                                         "rot": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "heads": 3, "seq": 5, "head_dim": 24,
                                       "rot": 6}, "cpu": True, "visible": False},
        {"name": "decode_b64_6p9b", "params": {"batch": 64, "heads": 32, "seq": 1,
                                               "head_dim": 128, "rot": 32}},
        {"name": "prefill_2k_6p9b", "params": {"batch": 1, "heads": 32, "seq": 2048,
                                               "head_dim": 128, "rot": 32}},
        {"name": "prefill_2k_20b", "params": {"batch": 2, "heads": 64, "seq": 2048,
                                              "head_dim": 96, "rot": 24}, "visible": False},
    ],
    "flops": lambda p: 2 * 3 * p["batch"] * p["heads"] * p["seq"] * p["rot"],
    "bytes": lambda p: 2 * 2 * 2 * p["batch"] * p["heads"] * p["seq"] * p["head_dim"]
    + 8 * p["batch"] * p["seq"],
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, rot: int = 32, base: float = 10000.0):
        super().__init__()
        self.rot = rot
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, rot, 2).float() / rot))

    def forward(self, q, k, positions):
        freqs = positions.float()[..., None] * self.inv_freq  # (batch, seq, rot/2)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
        out = []
        for t in (q, k):
            t_rot, t_pass = t[..., :self.rot], t[..., self.rot:]
            out.append(torch.cat((t_rot * cos + rotate_half(t_rot) * sin, t_pass), dim=-1))
        return tuple(out)


def get_inputs(batch: int = 1, heads: int = 32, seq: int = 2048, head_dim: int = 128,
               dtype=torch.float16):
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype)
    k = gen.randn(batch, heads, seq, head_dim, dtype=dtype)
    return [q, k, gen.indices(2048, batch, seq)]


def get_init_inputs(rot: int = 32):
    return [rot, 10000.0]
