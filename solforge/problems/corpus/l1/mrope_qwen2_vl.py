"""Multimodal rotary embedding (M-RoPE) of Qwen2-VL (HF apply_multimodal_rotary_pos_emb):
each token has three position ids (temporal, height, width); the 64 frequency slots of a
128-dim head are split into sections [16, 24, 24] and each section takes its angle from
one of the three ids; then rotate_half as in Llama; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "mrope_qwen2_vl",
    "category": "L1",
    "models": ["Qwen2-VL 7B", "Qwen2.5-VL 7B", "Qwen2-VL 72B"],
    "family": "Qwen2-VL",
    "shapes_from": "config.json of Qwen/Qwen2-VL-7B-Instruct (hidden 3584, 28 heads, 4 kv heads, "
                   "head_dim 128, rope_scaling mrope_section [16, 24, 24], rope_theta 1000000) "
                   "and Qwen2-VL-72B (64 heads, 8 kv heads)",
    "precision": "bf16",
    "description": "positions (3, tokens): frequency slot i of section s uses positions[s]; "
                   "cos/sin "
                   "of the assembled angles rotate q (tokens, heads, d) and k (tokens, kv, d).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "heads": 2, "kv_heads": 1, "head_dim": 16,
                                         "sections": (2, 3, 3)}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 11, "heads": 3, "kv_heads": 3, "head_dim": 32,
                                       "sections": (4, 6, 6)}, "cpu": True, "visible": False},
        {"name": "prefill_image_1k_7b", "params": {"tokens": 1024, "heads": 28, "kv_heads": 4,
                                                   "head_dim": 128, "sections": (16, 24, 24)}},
        {"name": "prefill_video_8k_7b", "params": {"tokens": 8192, "heads": 28, "kv_heads": 4,
                                                   "head_dim": 128, "sections": (16, 24, 24)}},
        {"name": "decode_b32_72b", "params": {"tokens": 32, "heads": 64, "kv_heads": 8,
                                              "head_dim": 128, "sections": (16, 24, 24)},
         "visible": False},
    ],
    "flops": lambda p: 3 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"],
    "bytes": lambda p: 2 * 2 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"]
    + 24 * p["tokens"],
}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, head_dim: int = 128, sections=(16, 24, 24), theta: float = 1e6):
        super().__init__()
        assert sum(sections) * 2 == head_dim, "mrope sections cover head_dim / 2 slots"
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv)
        # which of the three position ids each of the head_dim slots (both halves) reads
        which = torch.cat([torch.full((n,), i) for i, n in enumerate(sections)])
        self.register_buffer("which", torch.cat((which, which)))

    def forward(self, q, k, positions):
        freqs = positions.float()[..., None] * self.inv_freq  # (3, tokens, d/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (3, tokens, d)
        emb = emb.gather(0, self.which[None, None, :].expand(1, emb.shape[1], -1))[0]
        cos, sin = emb.cos().to(q.dtype)[:, None], emb.sin().to(q.dtype)[:, None]
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def get_inputs(tokens: int = 1024, heads: int = 28, kv_heads: int = 4, head_dim: int = 128,
               dtype=torch.bfloat16):
    q = gen.randn(tokens, heads, head_dim, dtype=dtype)
    k = gen.randn(tokens, kv_heads, head_dim, dtype=dtype)
    return [q, k, gen.indices(4096, 3, tokens)]


def get_init_inputs(head_dim: int = 128, sections=(16, 24, 24)):
    return [head_dim, tuple(sections), 1e6]
