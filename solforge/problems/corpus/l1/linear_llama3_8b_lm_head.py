"""LM head of Llama 3 8B (4096 -> 128256 vocabulary logits), bf16, no bias."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "linear_llama3_8b_lm_head",
    "category": "L1",
    "models": ["Llama 3 8B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "logits = h @ W^T with W [128256, 4096] (LlamaForCausalLM.lm_head): at decode "
                   "a 1 GB weight read for a few rows, in training every token's logits.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "in_features": 257, "out_features": 509},
         "cpu": True},
        {"name": "decode_m1",
         "params": {"tokens": 1, "in_features": 4096, "out_features": 128256}},
        {"name": "decode_m64",
         "params": {"tokens": 64, "in_features": 4096, "out_features": 128256}},
        {"name": "train_m2048",
         "params": {"tokens": 2048, "in_features": 4096, "out_features": 128256}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "in_features": 509, "out_features": 131},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["in_features"] * p["out_features"],
    # x and W read, y written once (bf16)
    "bytes": lambda p: 2 * (p["tokens"] * p["in_features"] + p["out_features"] * p["in_features"]
                            + p["tokens"] * p["out_features"]),
}


class Model(nn.Module):
    def __init__(self, in_features: int = 4096, out_features: int = 128256, dtype=torch.bfloat16):
        super().__init__()
        self.lm_head = nn.Linear(in_features, out_features, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(x)


def get_inputs(tokens: int = 64, in_features: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, in_features, dtype=dtype)]


def get_init_inputs(in_features: int = 4096, out_features: int = 128256, dtype=torch.bfloat16):
    return [in_features, out_features, dtype]
