"""SiLU activation of the Llama 3 MLP gate (act_fn of LlamaMLP), bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "silu_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "y = x * sigmoid(x) on the gate projection's output [tokens, intermediate] "
                   "(intermediate 14336 for 8B, 28672 for 70B), bf16 in and out (nn.SiLU).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "intermediate": 257}, "cpu": True},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "intermediate": 14336}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "intermediate": 14336}},
        {"name": "prefill_2k_70b", "params": {"tokens": 2048, "intermediate": 28672},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "intermediate": 509}, "cpu": True,
         "visible": False},
    ],
    # negate, exp, add, divide (or reciprocal and multiply) per element
    "flops": lambda p: 4 * p["tokens"] * p["intermediate"],
    "bytes": lambda p: 2 * 2 * p["tokens"] * p["intermediate"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act_fn(x)


def get_inputs(tokens: int = 8192, intermediate: int = 14336, dtype=torch.bfloat16):
    return [gen.randn(tokens, intermediate, dtype=dtype, scale=2.0)]


def get_init_inputs():
    return []
