"""DeepSeek-V2's group-limited greedy routing (HF DeepseekV2MoEGate, topk_method
group_limited_greedy): softmax over 160 experts, the 8 groups of 20 scored by their best
expert, only the top-3 groups kept, top-6 experts among them, weights scaled by
routed_scaling_factor 16 (no renormalization); fp32 scores."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_router_group_limited_deepseek_v2",
    "category": "L2",
    "models": ["DeepSeek-V2", "DeepSeek-V2.5"],
    "family": "DeepSeek-V2",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V2 (hidden 5120, n_routed_experts 160, "
                   "n_group 8, topk_group 3, num_experts_per_tok 6, routed_scaling_factor 16.0, "
                   "scoring_func softmax, norm_topk_prob false)",
    "precision": "bf16",
    "description": "p = softmax(logits fp32) (tokens, E); group score = max over each group; keep "
                   "top topk_group groups; (w, e) = topk(p masked to kept groups, top_k); w *= "
                   "scaling; returns (w, e).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "experts": 16, "groups": 4, "topk_group": 2,
                                         "top_k": 3}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "experts": 12, "groups": 3, "topk_group": 1,
                                       "top_k": 2}, "cpu": True, "visible": False},
        {"name": "decode_b64", "params": {"tokens": 64, "experts": 160, "groups": 8,
                                          "topk_group": 3, "top_k": 6}},
        {"name": "prefill_4k", "params": {"tokens": 4096, "experts": 160, "groups": 8,
                                          "topk_group": 3, "top_k": 6}},
        {"name": "prefill_16k", "params": {"tokens": 16384, "experts": 160, "groups": 8,
                                           "topk_group": 3, "top_k": 6}, "visible": False},
    ],
    "flops": lambda p: 6 * p["tokens"] * p["experts"],
    "bytes": lambda p: 4 * p["tokens"] * p["experts"] + 12 * p["tokens"] * p["top_k"],
    "index_outputs": {1: {"from_inputs": lambda logits: F.softmax(logits, dim=-1,
                                                                  dtype=torch.float),
                          "dim": -1}},
}


class Model(nn.Module):
    def __init__(self, groups: int = 8, topk_group: int = 3, top_k: int = 6,
                 scaling: float = 16.0):
        super().__init__()
        self.groups, self.topk_group, self.top_k, self.scaling = groups, topk_group, top_k, scaling

    def forward(self, logits: torch.Tensor):
        scores = F.softmax(logits, dim=-1, dtype=torch.float)
        n, e = scores.shape
        group_scores = scores.view(n, self.groups, -1).max(dim=-1).values
        group_idx = torch.topk(group_scores, self.topk_group, dim=-1, sorted=False).indices
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1.0)
        score_mask = group_mask[:, :, None].expand(n, self.groups, e // self.groups).reshape(n, e)
        w, idx = torch.topk(scores.masked_fill(score_mask == 0, 0.0), self.top_k, dim=-1)
        return w * self.scaling, idx


def get_inputs(tokens: int = 64, experts: int = 160, dtype=torch.bfloat16):
    return [gen.randn(tokens, experts, dtype=dtype, scale=2.0)]


def get_init_inputs(groups: int = 8, topk_group: int = 3, top_k: int = 6):
    return [groups, topk_group, top_k, 16.0]
