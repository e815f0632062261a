"""Phi-3's MLP (HF Phi3MLP): one fused gate_up_proj Linear to 2 * intermediate whose output is
chunked into gate and up halves, SiLU(gate) * up, down_proj; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "fused_gate_up_mlp_phi3",
    "category": "L2",
    "models": ["Phi-3 mini", "Phi-3 medium", "Phi-4"],
    "family": "Phi-3",
    "shapes_from": "config.json of microsoft/Phi-3-mini-4k-instruct (hidden_size 3072, "
                   "intermediate_size 8192), Phi-3-medium-4k-instruct (5120, 17920) and "
                   "microsoft/phi-4 (5120, 17920)",
    "precision": "bf16",
    "description": "x (tokens, H) -> (g, u) = chunk(gate_up(x), 2) -> down(silu(g) * u).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 4, "hidden": 32, "intermediate": 96},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 24, "intermediate": 56},
         "cpu": True, "visible": False},
        {"name": "decode_b16_mini", "params": {"tokens": 16, "hidden": 3072,
                                               "intermediate": 8192}},
        {"name": "prefill_4k_mini", "params": {"tokens": 4096, "hidden": 3072,
                                               "intermediate": 8192}},
        {"name": "prefill_2k_medium", "params": {"tokens": 2048, "hidden": 5120,
                                                 "intermediate": 17920}, "visible": False},
        {"name": "decode_b1_medium", "params": {"tokens": 1, "hidden": 5120,
                                                "intermediate": 17920}, "visible": False},
    ],
    "flops": lambda p: 6 * p["tokens"] * p["hidden"] * p["intermediate"]
    + 5 * p["tokens"] * p["intermediate"],
    "bytes": lambda p: 2 * (3 * p["hidden"] * p["intermediate"] + 2 * p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 3072, intermediate: int = 8192, dtype=torch.bfloat16):
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden, 2 * intermediate, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)
        nn.init.normal_(self.gate_up_proj.weight, std=hidden ** -0.5)
        nn.init.normal_(self.down_proj.weight, std=0.5 * intermediate ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def get_inputs(tokens: int = 16, hidden: int = 3072, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 3072, intermediate: int = 8192, dtype=torch.bfloat16):
    return [hidden, intermediate, dtype]
