"""Expert FFNs of a Mixtral MoE layer for routed tokens (HF MixtralSparseMoeBlock after the
router): each token runs through its top-k SwiGLU experts only, outputs weighted and summed."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen


def _experts_touched(p):
    """Expected number of distinct experts the random routing selects (their weights are read)."""
    return p["experts"] * (1 - (1 - p["top_k"] / p["experts"]) ** p["tokens"])


SOLFORGE = {
    "name": "moe_experts_mixtral",
    "category": "L2",
    "models": ["Mixtral 8x7B", "Mixtral 8x22B"],
    "family": "Mixtral",
    "shapes_from": "config.json of mistralai/Mixtral-8x7B-v0.1: hidden 4096, intermediate_size "
                   "14336 (7168 per GPU at TP 2), 8 experts, top-2",
    "precision": "bf16",
    "description": "Sparse MoE FFN: for each expert, gather its tokens, w2(silu(w1 x) * w3 x), "
                   "scale by the routing weight and scatter-add into the output (bf16). Real "
                   "per-GPU shapes: Mixtral 8x7B at tensor parallelism 2, 8x22B at 8.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 32, "intermediate": 48,
                                         "experts": 8, "top_k": 2}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 40, "intermediate": 67,
                                       "experts": 5, "top_k": 3}, "cpu": True, "visible": False},
        {"name": "decode_b16_8x7b_tp2", "params": {"tokens": 16, "hidden": 4096,
                                                   "intermediate": 7168, "experts": 8,
                                                   "top_k": 2}},
        {"name": "prefill_4k_8x7b_tp2", "params": {"tokens": 4096, "hidden": 4096,
                                                   "intermediate": 7168, "experts": 8,
                                                   "top_k": 2}, "visible": False},
        {"name": "prefill_2k_8x22b_tp8", "params": {"tokens": 2048, "hidden": 6144,
                                                    "intermediate": 2048, "experts": 8,
                                                    "top_k": 2}},
        {"name": "decode_b1_8x22b_tp8", "params": {"tokens": 1, "hidden": 6144,
                                                   "intermediate": 2048, "experts": 8,
                                                   "top_k": 2}, "visible": False},
    ],
    # only routed (token, expert) pairs: three GEMMs, SiLU*up, the weighted sum
    "flops": lambda p: p["tokens"] * p["top_k"] * (6 * p["hidden"] * p["intermediate"]
                                                   + 5 * p["intermediate"] + 2 * p["hidden"]),
    # tokens in and out (bf16), weights and ids, the weights of the experts actually used
    "bytes": lambda p: 4 * p["tokens"] * p["hidden"] + 10 * p["tokens"] * p["top_k"]
    + 6 * p["hidden"] * p["intermediate"] * _experts_touched(p),
}


class Expert(nn.Module):
    """MixtralBlockSparseTop2MLP."""

    def __init__(self, hidden: int, intermediate: int, dtype):
        super().__init__()
        self.w1 = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.w2 = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)
        self.w3 = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        # LeCun-normal init (Llama 3 8B's 0.02 is 1.3 / sqrt(4096)); the output of std ~0.3,
        # the size of an MLP's contribution to the residual stream
        for lin in (self.w1, self.w3):
            nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)
        nn.init.normal_(self.w2.weight, std=0.5 * self.w2.in_features ** -0.5)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, intermediate: int = 7168, experts: int = 8,
                 dtype=torch.bfloat16):
        super().__init__()
        self.num_experts = experts
        self.experts = nn.ModuleList(Expert(hidden, intermediate, dtype) for _ in range(experts))

    def forward(self, hidden_states: torch.Tensor, routing_weights: torch.Tensor,
                selected_experts: torch.Tensor) -> torch.Tensor:
        tokens, hidden = hidden_states.shape
        final = torch.zeros((tokens, hidden), dtype=hidden_states.dtype,
                            device=hidden_states.device)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit.flatten().tolist():
            idx, top_x = torch.where(expert_mask[expert_idx])
            current_state = hidden_states[top_x]
            current = self.experts[expert_idx](current_state) * routing_weights[top_x, idx, None]
            final.index_add_(0, top_x, current.to(hidden_states.dtype))
        return final


def get_inputs(tokens: int = 16, hidden: int = 4096, experts: int = 8, top_k: int = 2,
               dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    # renormalized top-k router weights: positive, summing to one per token
    weights = torch.softmax(gen.randn(tokens, top_k), dim=-1).to(dtype)
    ids = gen.routing_ids(tokens, experts, top_k)
    return [x, weights, ids]


def get_init_inputs(hidden: int = 4096, intermediate: int = 7168, experts: int = 8,
                    dtype=torch.bfloat16):
    return [hidden, intermediate, experts, dtype]
