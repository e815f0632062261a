"""GeGLU MLP of Gemma / Gemma 2 (HF GemmaMLP): down(gelu_tanh(gate(x)) * up(x)), bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "geglu_mlp_gemma",
    "category": "L2",
    "models": ["Gemma 7B", "Gemma 2 9B", "Gemma 2 2B"],
    "family": "Gemma",
    "shapes_from": "config.json of google/gemma-7b (hidden 3072, intermediate 24576) and "
                   "gemma-2-9b (hidden 3584, intermediate 14336)",
    "precision": "bf16",
    "description": "The feed-forward block of a Gemma decoder layer: gate and up projections, "
                   "GELU (tanh approximation) of gate times up, down projection.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "hidden": 48, "intermediate": 192},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 17, "hidden": 72, "intermediate": 331},
         "cpu": True, "visible": False},
        {"name": "decode_b8_gemma7b", "params": {"tokens": 8, "hidden": 3072,
                                                 "intermediate": 24576}},
        {"name": "prefill_2k_gemma2_9b", "params": {"tokens": 2048, "hidden": 3584,
                                                    "intermediate": 14336}},
        {"name": "decode_b1_gemma2_2b", "params": {"tokens": 1, "hidden": 2304,
                                                   "intermediate": 9216}, "visible": False},
        {"name": "prefill_4k_gemma7b", "params": {"tokens": 4096, "hidden": 3072,
                                                  "intermediate": 24576}, "visible": False},
    ],
    # three GEMMs; tanh-GELU and the product about 10 FLOPs per intermediate element
    "flops": lambda p: 6 * p["tokens"] * p["hidden"] * p["intermediate"]
    + 10 * p["tokens"] * p["intermediate"],
    "bytes": lambda p: 2 * (2 * p["tokens"] * p["hidden"] + 3 * p["hidden"] * p["intermediate"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 3072, intermediate: int = 24576, dtype=torch.bfloat16):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)
        # LeCun-normal init (Llama 3 8B's 0.02 is 1.3 / sqrt(4096)); the output of std ~0.3,
        # the size of an MLP's contribution to the residual stream
        for lin in (self.gate_proj, self.up_proj):
            nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)
        nn.init.normal_(self.down_proj.weight, std=0.5 * self.down_proj.in_features ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = F.gelu(self.gate_proj(x), approximate="tanh")
        return self.down_proj(gate * self.up_proj(x))


def get_inputs(tokens: int = 8, hidden: int = 3072, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 3072, intermediate: int = 24576, dtype=torch.bfloat16):
    return [hidden, intermediate, dtype]
