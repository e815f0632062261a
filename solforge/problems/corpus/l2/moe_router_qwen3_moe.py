"""Qwen3-MoE's router (HF Qwen3MoeSparseMoeBlock, norm_topk_prob true): softmax over 128
experts in fp32, top-8, the 8 weights renormalized to sum to one and cast to the hidden
dtype; bf16 logits in."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_router_qwen3_moe",
    "category": "L2",
    "models": ["Qwen3 30B-A3B", "Qwen3 235B-A22B"],
    "family": "Qwen3-MoE",
    "shapes_from": "config.json of Qwen/Qwen3-30B-A3B (hidden 2048, num_experts 128, "
                   "num_experts_per_tok 8, norm_topk_prob true) and Qwen3-235B-A22B (hidden 4096, "
                   "128 experts, top-8)",
    "precision": "bf16",
    "description": "p = softmax(router_logits fp32); (w, e) = topk(p, 8); w = (w / w.sum) in bf16; "
                   "returns (w, e), e judged by the probabilities it selects.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 9, "experts": 16, "top_k": 4}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 2, "experts": 10, "top_k": 3}, "cpu": True,
         "visible": False},
        {"name": "decode_b64", "params": {"tokens": 64, "experts": 128, "top_k": 8}},
        {"name": "prefill_8k", "params": {"tokens": 8192, "experts": 128, "top_k": 8}},
        {"name": "prefill_32k", "params": {"tokens": 32768, "experts": 128, "top_k": 8},
         "visible": False},
    ],
    "flops": lambda p: 5 * p["tokens"] * p["experts"],
    "bytes": lambda p: 2 * p["tokens"] * p["experts"] + 10 * p["tokens"] * p["top_k"],
    "index_outputs": {1: {"from_inputs": lambda logits: F.softmax(logits, dim=-1,
                                                                  dtype=torch.float),
                          "dim": -1}},
}


class Model(nn.Module):
    def __init__(self, top_k: int = 8):
        super().__init__()
        self.top_k = top_k

    def forward(self, router_logits: torch.Tensor):
        probs = F.softmax(router_logits, dim=-1, dtype=torch.float)
        w, e = torch.topk(probs, self.top_k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        return w.to(router_logits.dtype), e


def get_inputs(tokens: int = 64, experts: int = 128, dtype=torch.bfloat16):
    return [gen.randn(tokens, experts, dtype=dtype, scale=2.0)]


def get_init_inputs(top_k: int = 8):
    return [top_k]
