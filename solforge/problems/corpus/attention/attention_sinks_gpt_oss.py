"""gpt-oss attention with learned sinks (HF GptOssAttention, eager path): grouped-query causal
attention, optionally within a 128-token sliding window (alternate layers), where each head
has a learned sink logit that joins the softmax's denominator and is then dropped, so a head
may attend to nothing; bf16 inputs, fp32 scores."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "attention_sinks_gpt_oss",
    "category": "attention",
    "models": ["gpt-oss 20B", "gpt-oss 120B"],
    "family": "gpt-oss",
    "shapes_from": "config.json of openai/gpt-oss-20b and gpt-oss-120b: 64 attention heads, 8 kv "
                   "heads, head_dim 64, sliding_window 128 on alternating layers",
    "precision": "bf16",
    "description": "p = softmax([q k^T / 8 masked (causal, and j > i - window when window > 0), "
                   "sink_h]) without its last column; o = p v. q (b, heads, s, 64), k, v (b, "
                   "kv_heads, s, 64), sinks (heads,) a parameter.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 11, "heads": 4, "kv_heads": 2,
                                         "head_dim": 16, "window": 0}, "cpu": True},
        {"name": "cpu_window", "params": {"batch": 2, "seq": 9, "heads": 2, "kv_heads": 1,
                                          "head_dim": 16, "window": 4}, "cpu": True,
         "visible": False},
        {"name": "prefill_full_b1_s4096", "params": {"batch": 1, "seq": 4096, "heads": 64,
                                                     "kv_heads": 8, "head_dim": 64,
                                                     "window": 0}},
        {"name": "prefill_sliding_b1_s4096", "params": {"batch": 1, "seq": 4096, "heads": 64,
                                                        "kv_heads": 8, "head_dim": 64,
                                                        "window": 128}},
        {"name": "prefill_full_b4_s1024", "params": {"batch": 4, "seq": 1024, "heads": 64,
                                                     "kv_heads": 8, "head_dim": 64,
                                                     "window": 0}, "visible": False},
    ],
    # necessary work: the attended pairs only (the causal half, or the window)
    "flops": lambda p: 4 * p["batch"] * p["heads"] * p["head_dim"] * p["seq"]
    * (min(p["window"], p["seq"]) if p["window"] else (p["seq"] + 1) / 2),
    "bytes": lambda p: 2 * p["batch"] * p["seq"] * p["head_dim"]
    * (2 * p["heads"] + 2 * p["kv_heads"]) + 4 * p["heads"],
}


class Model(nn.Module):
    def __init__(self, heads: int = 64, kv_heads: int = 8, head_dim: int = 64, window: int = 0):
        super().__init__()
        self.n_rep = heads // kv_heads
        self.scale = head_dim ** -0.5
        # no window: one so wide it masks nothing (the graph stays the same for every workload)
        self.window = window if window > 0 else 2 ** 30
        self.sinks = nn.Parameter(torch.randn(heads) * 2.0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, h, s, _ = q.shape
        k = k.repeat_interleave(self.n_rep, dim=1).float()
        v = v.repeat_interleave(self.n_rep, dim=1).float()
        scores = torch.matmul(q.float(), k.transpose(-1, -2)) * self.scale
        i = torch.arange(s, device=q.device)[:, None]
        j = torch.arange(s, device=q.device)[None, :]
        masked = (j > i) | (j <= i - self.window)
        scores = scores.masked_fill(masked, float("-inf"))
        sink = self.sinks.float().view(1, h, 1, 1).expand(b, h, s, 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        return torch.matmul(probs, v).to(q.dtype)


def get_inputs(batch: int = 1, seq: int = 4096, heads: int = 64, kv_heads: int = 8,
               head_dim: int = 64, dtype=torch.bfloat16):
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(heads: int = 64, kv_heads: int = 8, head_dim: int = 64, window: int = 0):
    return [heads, kv_heads, head_dim, window]
