"""InternLM2's packed QKV projection (HF InternLM2Attention): one wqkv Linear whose output is
laid out per key/value group as [q_1 .. q_r, k, v] (r = heads / kv_heads query heads per
group), so q, k and v are gathered from interleaved slices rather than three contiguous
blocks; returns q (tokens, heads, d), k and v (tokens, kv_heads, d); bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "packed_wqkv_split_internlm2",
    "category": "L2",
    "models": ["InternLM2 7B", "InternLM2 20B", "InternLM2.5 7B"],
    "family": "InternLM",
    "shapes_from": "config.json of internlm/internlm2-7b (hidden_size 4096, 32 heads, 8 kv heads, "
                   "head_dim 128), internlm2-20b (6144, 48 heads, 8 kv heads) and internlm2_5-7b",
    "precision": "bf16",
    "description": "qkv = x Wqkv^T viewed (tokens, kv_heads, r + 2, d); q = [..., :r] as (tokens, "
                   "heads, d), k = [..., r], v = [..., r + 1].",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "hidden": 64, "heads": 4, "kv_heads": 2},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 48, "heads": 6, "kv_heads": 3},
         "cpu": True, "visible": False},
        {"name": "decode_b64_7b", "params": {"tokens": 64, "hidden": 4096, "heads": 32,
                                             "kv_heads": 8}},
        {"name": "prefill_4k_7b", "params": {"tokens": 4096, "hidden": 4096, "heads": 32,
                                             "kv_heads": 8}},
        {"name": "prefill_2k_20b", "params": {"tokens": 2048, "hidden": 6144, "heads": 48,
                                              "kv_heads": 8}, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["hidden"] ** 2 * (p["heads"] + 2 * p["kv_heads"])
    / p["heads"],
    "bytes": lambda p: 2 * (p["hidden"] ** 2 * (p["heads"] + 2 * p["kv_heads"]) / p["heads"]
                            + p["tokens"] * p["hidden"] * (2 + 2 * p["kv_heads"] / p["heads"])),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, heads: int = 32, kv_heads: int = 8,
                 dtype=torch.bfloat16):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, hidden // heads
        self.wqkv = nn.Linear(hidden, (heads + 2 * kv_heads) * self.d, bias=False, dtype=dtype)
        nn.init.normal_(self.wqkv.weight, std=hidden ** -0.5)

    def forward(self, x: torch.Tensor):
        r = self.heads // self.kv_heads
        qkv = self.wqkv(x).view(x.shape[0], self.kv_heads, r + 2, self.d)
        q = qkv[:, :, :r].reshape(x.shape[0], self.heads, self.d)
        return q, qkv[:, :, r], qkv[:, :, r + 1]


def get_inputs(tokens: int = 64, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 4096, heads: int = 32, kv_heads: int = 8,
                    dtype=torch.bfloat16):
    return [hidden, heads, kv_heads, dtype]
