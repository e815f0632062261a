"""Nemotron's MLP (HF NemotronMLP): up projection, squared ReLU (relu(x)^2), down projection,
no gate and no bias; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "relu2_mlp_nemotron",
    "category": "L2",
    "models": ["Nemotron-4 15B", "Minitron 8B", "Nemotron-4 340B"],
    "family": "Nemotron",
    "shapes_from": "config.json of nvidia/Minitron-8B-Base (hidden_size 4096, intermediate_size "
                   "16384, hidden_act relu2), Nemotron-4 15B (6144, 24576) and Nemotron-4 340B "
                   "(18432, 73728; 9216 per GPU at TP 8)",
    "precision": "bf16",
    "description": "x (tokens, H) -> down(relu(up(x))^2).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "hidden": 32, "intermediate": 128},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 2, "hidden": 24, "intermediate": 80},
         "cpu": True, "visible": False},
        {"name": "decode_b32_15b", "params": {"tokens": 32, "hidden": 6144,
                                              "intermediate": 24576}},
        {"name": "prefill_4k_8b", "params": {"tokens": 4096, "hidden": 4096,
                                             "intermediate": 16384}},
        {"name": "prefill_2k_340b_tp8", "params": {"tokens": 2048, "hidden": 18432,
                                                   "intermediate": 9216}, "visible": False},
    ],
    "flops": lambda p: 4 * p["tokens"] * p["hidden"] * p["intermediate"]
    + 2 * p["tokens"] * p["intermediate"],
    "bytes": lambda p: 2 * (2 * p["hidden"] * p["intermediate"] + 2 * p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 6144, intermediate: int = 24576, dtype=torch.bfloat16):
        super().__init__()
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)
        nn.init.normal_(self.up_proj.weight, std=hidden ** -0.5)
        nn.init.normal_(self.down_proj.weight, std=0.5 * intermediate ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.relu(self.up_proj(x)).square())


def get_inputs(tokens: int = 32, hidden: int = 6144, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 6144, intermediate: int = 24576, dtype=torch.bfloat16):
    return [hidden, intermediate, dtype]
