"""DBRX's router (HF DbrxRouter, moe_normalize_expert_weights 1): softmax over 16 experts'
logits in fp32, top-4, the 4 weights renormalized by their L1 norm; logits computed from the
hidden state by a bias-free Linear; bf16 in."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_router_topk_dbrx",
    "category": "L2",
    "models": ["DBRX 132B"],
    "family": "DBRX",
    "shapes_from": "config.json of databricks/dbrx-base: d_model 6144, ffn_config moe_num_experts "
                   "16, moe_top_k 4, moe_normalize_expert_weights 1",
    "precision": "bf16",
    "description": "logits = x Wr^T (tokens, 16); p = softmax(logits) fp32; (w, e) = topk(p, 4); "
                   "w /= w.sum(-1); returns (w, e) with e judged by the probabilities it selects.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 32, "experts": 6, "top_k": 2},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 24, "experts": 16, "top_k": 4},
         "cpu": True, "visible": False},
        {"name": "decode_b64", "params": {"tokens": 64, "hidden": 6144, "experts": 16,
                                          "top_k": 4}},
        {"name": "prefill_8k", "params": {"tokens": 8192, "hidden": 6144, "experts": 16,
                                          "top_k": 4}},
        {"name": "prefill_2k", "params": {"tokens": 2048, "hidden": 6144, "experts": 16,
                                          "top_k": 4}, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["hidden"] * p["experts"]
    + 5 * p["tokens"] * p["experts"],
    "bytes": lambda p: 2 * (p["tokens"] * p["hidden"] + p["hidden"] * p["experts"])
    + 12 * p["tokens"] * p["top_k"],
    "index_outputs": {1: {"from_inputs": lambda x, w: F.softmax(
        (x @ w.t()).float(), dim=-1), "dim": -1}},
}


class Model(nn.Module):
    def __init__(self, top_k: int = 4):
        super().__init__()
        self.top_k = top_k

    def forward(self, x: torch.Tensor, router_weight: torch.Tensor):
        probs = F.softmax(F.linear(x, router_weight).float(), dim=-1)
        w, e = probs.topk(self.top_k, dim=-1)
        return w / w.sum(dim=-1, keepdim=True), e


def get_inputs(tokens: int = 64, hidden: int = 6144, experts: int = 16, dtype=torch.bfloat16):
    # the router's weight is an input, so the selected-from probabilities are a function of the
    # inputs (index_outputs); logits of std ~2
    return [gen.randn(tokens, hidden, dtype=dtype),
            gen.randn(experts, hidden, dtype=dtype, scale=2 * hidden ** -0.5)]


def get_init_inputs(top_k: int = 4):
    return [top_k]
