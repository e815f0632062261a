"""GELU (tanh approximation) of the Gemma 2 MLP gate (hidden_activation gelu_pytorch_tanh), bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "gelu_tanh_gemma2",
    "category": "L1",
    "models": ["Gemma 2 2B", "Gemma 2 9B", "Gemma 2 27B"],
    "family": "Gemma 2",
    "shapes_from": "config.json of google/gemma-2-9b (intermediate_size 14336), gemma-2-2b (9216) "
                   "and gemma-2-27b (36864), hidden_activation gelu_pytorch_tanh",
    "precision": "bf16",
    "description": "y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) on the gate projection's "
                   "output (intermediate 9216 / 14336 / 36864), bf16 (F.gelu(approximate='tanh')).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "intermediate": 257}, "cpu": True},
        {"name": "decode_b32_9b", "params": {"tokens": 32, "intermediate": 14336}},
        {"name": "prefill_4k_9b", "params": {"tokens": 4096, "intermediate": 14336}},
        {"name": "prefill_2k_27b", "params": {"tokens": 2048, "intermediate": 36864},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "intermediate": 509}, "cpu": True,
         "visible": False},
    ],
    # x^3 (2), fma (2), scale (1), tanh (1), 1 + t (1), two products (2) per element
    "flops": lambda p: 9 * p["tokens"] * p["intermediate"],
    "bytes": lambda p: 2 * 2 * p["tokens"] * p["intermediate"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x, approximate="tanh")


def get_inputs(tokens: int = 4096, intermediate: int = 14336, dtype=torch.bfloat16):
    return [gen.randn(tokens, intermediate, dtype=dtype, scale=2.0)]


def get_init_inputs():
    return []
