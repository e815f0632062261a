"""Llama 4's MoE routing (HF Llama4TextMoe): router logits over 16 (Scout) or 128 (Maverick)
experts, top-1, the chosen expert's input scaled by sigmoid(logit) before its FFN (not its
output), plus a shared expert every token goes through; here, given the router's logits, the
top-1 choice, the sigmoid input scaling and the shared SwiGLU expert, returning the scaled
routed input, its expert id and the shared expert's output; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_router_shared_llama4",
    "category": "L2",
    "models": ["Llama 4 Scout 17B-16E", "Llama 4 Maverick 17B-128E"],
    "family": "Llama 4",
    "shapes_from": "config.json of meta-llama/Llama-4-Scout-17B-16E (text_config: hidden_size "
                   "5120, num_local_experts 16, num_experts_per_tok 1, intermediate_size 8192) and "
                   "Llama-4-Maverick-17B-128E (128 experts)",
    "precision": "bf16",
    "description": "logits (tokens, E) given; e = argmax; routed_in = x * sigmoid(logits[e]); "
                   "shared = down(silu(gate(x)) * up(x)); returns (routed_in, e, shared).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "hidden": 32, "experts": 4,
                                         "intermediate": 64}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 24, "experts": 5,
                                       "intermediate": 40}, "cpu": True, "visible": False},
        {"name": "decode_b32_scout", "params": {"tokens": 32, "hidden": 5120, "experts": 16,
                                                "intermediate": 8192}},
        {"name": "prefill_4k_scout", "params": {"tokens": 4096, "hidden": 5120, "experts": 16,
                                                "intermediate": 8192}},
        {"name": "prefill_2k_maverick", "params": {"tokens": 2048, "hidden": 5120,
                                                   "experts": 128, "intermediate": 8192},
         "visible": False},
    ],
    # the expert id is judged by the router logit it selects: a near-tie may break either way
    "index_outputs": {1: {"from_inputs": lambda x, logits: logits.float(), "dim": -1}},
    "flops": lambda p: 6 * p["tokens"] * p["hidden"] * p["intermediate"],
    "bytes": lambda p: 2 * (3 * p["hidden"] * p["intermediate"] + 3 * p["tokens"] * p["hidden"]
                            + p["tokens"] * p["experts"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 5120, experts: int = 16, intermediate: int = 8192,
                 dtype=torch.bfloat16):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.up = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.down = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)
        for lin in (self.gate, self.up, self.down):
            nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)

    def forward(self, x: torch.Tensor, logits: torch.Tensor):
        top, idx = logits.topk(1, dim=-1)
        routed_in = x * torch.sigmoid(top.float()).to(x.dtype)
        shared = self.down(F.silu(self.gate(x)) * self.up(x))
        return routed_in, idx, shared


def get_inputs(tokens: int = 32, hidden: int = 5120, experts: int = 16, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype),
            gen.randn(tokens, experts, dtype=dtype, scale=2.0)]


def get_init_inputs(hidden: int = 5120, experts: int = 16, intermediate: int = 8192,
                    dtype=torch.bfloat16):
    return [hidden, experts, intermediate, dtype]
