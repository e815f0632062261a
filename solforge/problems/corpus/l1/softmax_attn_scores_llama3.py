"""Attention-probability softmax of Llama 3's eager attention: bf16 scores, fp32 softmax.

The scores are q.k^T / sqrt(128) with the causal mask already added (masked entries hold
the dtype's minimum, as HF's additive mask leaves them); decode rows see the whole cache.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "softmax_attn_scores_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "p = softmax(scores, dim=-1, dtype=float32).to(bf16) over the key axis of "
                   "[batch, heads, q_len, kv_len] causally masked scores (HF "
                   "eager_attention_forward).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "heads": 2, "q_len": 1, "kv_len": 257},
         "cpu": True},
        {"name": "decode_b64_8b", "params": {"batch": 64, "heads": 32, "q_len": 1,
                                             "kv_len": 4096}},
        {"name": "prefill_2k_8b", "params": {"batch": 1, "heads": 32, "q_len": 2048,
                                             "kv_len": 2048}},
        {"name": "decode_b16_70b", "params": {"batch": 16, "heads": 64, "q_len": 1,
                                              "kv_len": 8191}, "visible": False},
        {"name": "prefill_1536_70b", "params": {"batch": 1, "heads": 64, "q_len": 1536,
                                                "kv_len": 1536}, "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "heads": 3, "q_len": 13, "kv_len": 61},
         "cpu": True, "visible": False},
    ],
    # max, subtract, exp, sum, divide per element
    "flops": lambda p: 5 * p["batch"] * p["heads"] * p["q_len"] * p["kv_len"],
    # scores read and probabilities written, bf16
    "bytes": lambda p: 2 * 2 * p["batch"] * p["heads"] * p["q_len"] * p["kv_len"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)


def get_inputs(batch: int = 1, heads: int = 32, q_len: int = 2048, kv_len: int = 2048,
               dtype=torch.bfloat16):
    scores = gen.randn(batch, heads, q_len, kv_len, dtype=dtype, scale=2.0)
    allowed = gen.causal_mask(q_len, kv_len)  # bottom-right aligned: the last row sees all
    return [scores.masked_fill(~allowed, torch.finfo(dtype).min)]


def get_init_inputs():
    return []
