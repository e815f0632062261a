"""ModernBERT's MLP (HF ModernBertMLP): one bias-free Wi to 2 x intermediate, chunked into
input and gate, GELU(input) * gate, bias-free Wo back; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "geglu_mlp_modernbert",
    "category": "L2",
    "models": ["ModernBERT base", "ModernBERT large"],
    "family": "ModernBERT",
    "shapes_from": "config.json of answerdotai/ModernBERT-base (hidden_size 768, "
                   "intermediate_size 1152, max_position_embeddings 8192, mlp_bias false) and "
                   "ModernBERT-large (1024, 2624); unpadded token batches",
    "precision": "bf16",
    "description": "x (tokens, H) -> (a, g) = chunk(Wi x, 2) -> Wo(gelu(a) * g).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 32, "intermediate": 48},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 24, "intermediate": 40},
         "cpu": True, "visible": False},
        {"name": "base_32k_tokens", "params": {"tokens": 32768, "hidden": 768,
                                               "intermediate": 1152}},
        {"name": "large_8k_tokens", "params": {"tokens": 8192, "hidden": 1024,
                                               "intermediate": 2624}},
        {"name": "large_64k_tokens", "params": {"tokens": 65536, "hidden": 1024,
                                                "intermediate": 2624}, "visible": False},
    ],
    "flops": lambda p: 6 * p["tokens"] * p["hidden"] * p["intermediate"],
    "bytes": lambda p: 2 * (3 * p["hidden"] * p["intermediate"] + 2 * p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 768, intermediate: int = 1152, dtype=torch.bfloat16):
        super().__init__()
        self.Wi = nn.Linear(hidden, 2 * intermediate, bias=False, dtype=dtype)
        self.Wo = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)
        nn.init.normal_(self.Wi.weight, std=hidden ** -0.5)
        nn.init.normal_(self.Wo.weight, std=intermediate ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(F.gelu(a) * gate)


def get_inputs(tokens: int = 32768, hidden: int = 768, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 768, intermediate: int = 1152, dtype=torch.bfloat16):
    return [hidden, intermediate, dtype]
