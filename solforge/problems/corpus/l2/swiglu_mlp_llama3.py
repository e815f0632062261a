"""SwiGLU MLP of Llama 3 (HF LlamaMLP): down(silu(gate(x)) * up(x)), bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "swiglu_mlp_llama3",
    "category": "L2",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "The feed-forward block of a Llama 3 decoder layer: gate and up projections "
                   "(hidden -> intermediate), SiLU(gate) * up, down projection back to hidden.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 64, "intermediate": 176},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 1, "hidden": 96, "intermediate": 257},
         "cpu": True, "visible": False},
        {"name": "decode_b1_8b", "params": {"tokens": 1, "hidden": 4096, "intermediate": 14336}},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "hidden": 4096,
                                             "intermediate": 14336}},
        {"name": "prefill_4k_8b", "params": {"tokens": 4096, "hidden": 4096,
                                             "intermediate": 14336}, "visible": False},
        # Llama 3 70B with tensor parallelism 8: one GPU's slice of the intermediate dim
        {"name": "prefill_2k_70b_tp8", "params": {"tokens": 2048, "hidden": 8192,
                                                  "intermediate": 3584}, "visible": False},
    ],
    # three GEMMs; SiLU and the product about 5 FLOPs per intermediate element
    "flops": lambda p: 6 * p["tokens"] * p["hidden"] * p["intermediate"]
    + 5 * p["tokens"] * p["intermediate"],
    # x in, y out, three weight matrices, all bf16
    "bytes": lambda p: 2 * (2 * p["tokens"] * p["hidden"] + 3 * p["hidden"] * p["intermediate"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, intermediate: int = 14336, dtype=torch.bfloat16):
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
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def get_inputs(tokens: int = 64, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 4096, intermediate: int = 14336, dtype=torch.bfloat16):
    return [hidden, intermediate, dtype]
