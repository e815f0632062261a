"""Gemma 2's output head (HF Gemma2ForCausalLM): logits = lm_head(h), then the final logit
soft-cap 30 * tanh(logits / 30); bf16 weights (tied to the 256k embedding), fp32 logits."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "lm_head_softcap_gemma2",
    "category": "L2",
    "models": ["Gemma 2 9B", "Gemma 2 2B", "Gemma 2 27B"],
    "family": "Gemma 2",
    "shapes_from": "config.json of google/gemma-2-9b (hidden_size 3584, vocab_size 256000, "
                   "final_logit_softcapping 30.0), gemma-2-2b (2304) and gemma-2-27b (4608)",
    "precision": "bf16",
    "description": "logits = 30 * tanh((h W^T) / 30) for h (tokens, hidden) and W (vocab, hidden); "
                   "the GEMM in bf16, the cap applied to its fp32 result.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 3, "hidden": 64, "vocab": 1000}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 5, "hidden": 72, "vocab": 777}, "cpu": True,
         "visible": False},
        {"name": "decode_b1_9b", "params": {"tokens": 1, "hidden": 3584, "vocab": 256000}},
        {"name": "decode_b64_9b", "params": {"tokens": 64, "hidden": 3584, "vocab": 256000}},
        {"name": "decode_b16_2b", "params": {"tokens": 16, "hidden": 2304, "vocab": 256000},
         "visible": False},
        {"name": "decode_b32_27b", "params": {"tokens": 32, "hidden": 4608, "vocab": 256000},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["hidden"] * p["vocab"] + 3 * p["tokens"] * p["vocab"],
    # the weight dominates; h in bf16, logits out in fp32
    "bytes": lambda p: 2 * p["vocab"] * p["hidden"] + 2 * p["tokens"] * p["hidden"]
    + 4 * p["tokens"] * p["vocab"],
}


class Model(nn.Module):
    def __init__(self, hidden: int = 3584, vocab: int = 256000, softcap: float = 30.0,
                 dtype=torch.bfloat16):
        super().__init__()
        self.lm_head = nn.Linear(hidden, vocab, bias=False, dtype=dtype)
        # logits of std ~20: the cap at 30 matters for the top ones
        nn.init.normal_(self.lm_head.weight, std=20 * hidden ** -0.5)
        self.softcap = softcap

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(h).float()
        return torch.tanh(logits / self.softcap) * self.softcap


def get_inputs(tokens: int = 1, hidden: int = 3584, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 3584, vocab: int = 256000, dtype=torch.bfloat16):
    return [hidden, vocab, 30.0, dtype]
