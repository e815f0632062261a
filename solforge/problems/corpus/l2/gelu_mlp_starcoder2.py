"""StarCoder2's MLP (HF Starcoder2MLP): c_fc hidden -> 4 hidden with bias, GELU (tanh
approximation, gelu_pytorch_tanh), c_proj back with bias; no gate; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "gelu_mlp_starcoder2",
    "category": "L2",
    "models": ["StarCoder2 15B", "StarCoder2 7B", "StarCoder2 3B"],
    "family": "StarCoder2",
    "shapes_from": "config.json of bigcode/starcoder2-15b (hidden_size 6144, intermediate_size "
                   "24576, use_bias true, hidden_act gelu_pytorch_tanh), starcoder2-7b (4608, "
                   "18432) and starcoder2-3b (3072, 12288)",
    "precision": "bf16",
    "description": "x (tokens, H) -> c_proj(gelu_tanh(c_fc(x))), both Linear layers with bias.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "hidden": 32, "intermediate": 128},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 24, "intermediate": 72},
         "cpu": True, "visible": False},
        {"name": "decode_b32_15b", "params": {"tokens": 32, "hidden": 6144,
                                              "intermediate": 24576}},
        {"name": "prefill_4k_7b", "params": {"tokens": 4096, "hidden": 4608,
                                             "intermediate": 18432}},
        {"name": "prefill_2k_3b", "params": {"tokens": 2048, "hidden": 3072,
                                             "intermediate": 12288}, "visible": False},
        {"name": "decode_b1_15b", "params": {"tokens": 1, "hidden": 6144,
                                             "intermediate": 24576}, "visible": False},
    ],
    "flops": lambda p: 4 * p["tokens"] * p["hidden"] * p["intermediate"]
    + 8 * p["tokens"] * p["intermediate"],
    "bytes": lambda p: 2 * (2 * p["hidden"] * p["intermediate"] + 2 * p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 6144, intermediate: int = 24576, dtype=torch.bfloat16):
        super().__init__()
        self.c_fc = nn.Linear(hidden, intermediate, dtype=dtype)
        self.c_proj = nn.Linear(intermediate, hidden, dtype=dtype)
        nn.init.normal_(self.c_fc.weight, std=hidden ** -0.5)
        nn.init.normal_(self.c_proj.weight, std=0.5 * intermediate ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


def get_inputs(tokens: int = 32, hidden: int = 6144, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 6144, intermediate: int = 24576, dtype=torch.bfloat16):
    return [hidden, intermediate, dtype]
