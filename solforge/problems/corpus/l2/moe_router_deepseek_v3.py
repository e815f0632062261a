"""Group-limited top-k router of DeepSeek-V3 / Kimi K2 (HF DeepseekV3TopkRouter, noaux_tc).

Simplified to be exact: the input is the router's sigmoid scores, given on a 2**-10 grid,
and the correction bias is a multiple of 2**-10 plus a distinct multiple of 2**-20 per
expert (smaller than the grid step). Then every sum and comparison below is exact in fp32
and no two candidates ever tie, so the selected expert ids do not depend on summation order.
The final top-k is sorted (HF uses sorted=False) so the id order is deterministic.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_router_deepseek_v3",
    "category": "L2",
    "models": ["DeepSeek-V3", "Kimi K2"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "bf16",
    "description": "DeepSeek-V3 routing: scores + correction bias; each group scored by its "
                   "top-2 sum, the top groups kept, top-k experts among them; weights are the "
                   "unbiased scores renormalized and scaled (fp32), ids sorted by biased score.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 17, "experts": 32, "groups": 4,
                                         "topk_group": 2, "top_k": 4}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 1, "experts": 48, "groups": 6,
                                       "topk_group": 3, "top_k": 5}, "cpu": True,
         "visible": False},
        {"name": "cpu_odd2", "params": {"tokens": 97, "experts": 24, "groups": 3,
                                        "topk_group": 1, "top_k": 3}, "cpu": True,
         "visible": False},
        {"name": "decode_b64_dsv3", "params": {"tokens": 64, "experts": 256, "groups": 8,
                                               "topk_group": 4, "top_k": 8}},
        {"name": "prefill_8k_dsv3", "params": {"tokens": 8192, "experts": 256, "groups": 8,
                                               "topk_group": 4, "top_k": 8}},
        {"name": "prefill_4k_kimi_k2", "params": {"tokens": 4096, "experts": 384, "groups": 1,
                                                  "topk_group": 1, "top_k": 8,
                                                  "scaling": 2.827}, "visible": False},
    ],
    # bias add, group top-2 and sums, group and expert selection, gather and normalization
    "flops": lambda p: 4 * p["tokens"] * p["experts"] + 3 * p["tokens"] * p["top_k"],
    # fp32 scores and bias in; fp32 weights and int64 ids out
    "bytes": lambda p: 4 * p["tokens"] * p["experts"] + 4 * p["experts"]
    + 12 * p["tokens"] * p["top_k"],
}


class Model(nn.Module):
    def __init__(self, experts: int = 256, groups: int = 8, topk_group: int = 4, top_k: int = 8,
                 scaling: float = 2.5):
        super().__init__()
        assert experts <= 512 and experts % groups == 0
        self.experts, self.groups, self.topk_group, self.top_k = experts, groups, topk_group, top_k
        self.routed_scaling_factor = scaling
        per = experts // groups
        coarse = torch.randint(-16, 17, (experts,)).double() * 2.0 ** -10
        # group g's experts get the fine offsets g*per+1 .. (g+1)*per, shuffled in the group,
        # so the top-2 sums of different groups never share a fine part either
        fine = torch.cat([torch.randperm(per) + g * per + 1 for g in range(groups)]).double()
        bias = (coarse + fine * 2.0 ** -20).float()
        self.register_buffer("e_score_correction_bias", bias)

    def forward(self, scores: torch.Tensor):
        n, e = scores.shape
        scores_for_choice = scores + self.e_score_correction_bias.unsqueeze(0)
        group_scores = (scores_for_choice.view(n, self.groups, e // self.groups)
                        .topk(2, dim=-1)[0].sum(dim=-1))
        group_idx = torch.topk(group_scores, k=self.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = (group_mask.unsqueeze(-1).expand(n, self.groups, e // self.groups)
                      .reshape(n, e))
        scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=True)[1]
        topk_weights = scores.gather(1, topk_indices)
        topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
        return topk_weights * self.routed_scaling_factor, topk_indices


def get_inputs(tokens: int = 8192, experts: int = 256):
    # sigmoid of the router logits (spread so the top-k weights differ), on the 2**-10 grid,
    # kept above the bias's reach of 0
    logits = gen.randn(tokens, experts, scale=1.5) - 2.0
    q = (torch.sigmoid(logits) * 1024).round().clamp(17, 1007)
    return [q / 1024]


def get_init_inputs(experts: int = 256, groups: int = 8, topk_group: int = 4, top_k: int = 8,
                    scaling: float = 2.5):
    return [experts, groups, topk_group, top_k, scaling]
