"""Top-k softmax router of Mixtral / DBRX (HF MixtralSparseMoeBlock): softmax over experts,
top-k, renormalize the k weights, cast them to the activation dtype.

The router logits are given in fp32 (the gate GEMM's accumulator, as vLLM and Megatron keep
them). The expert ids are judged by the probabilities they select (``index_outputs``), not
compared exactly: two correct routers may break a tie or a near-tie differently (near-ties
flipped 2 of 65,536 ids of a kept winner on uniform inputs; docs/EVALUATOR.md, "One
evaluation"). Ties also happen where probabilities underflow to zero (a logit 104 or more
below its row's largest, as outlier inputs give; benchmarks/results/2026-12-02-h200-s10),
where ``torch.topk`` orders equal values as its sort happens to: both ids then select 0.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_router_mixtral",
    "category": "L2",
    "models": ["Mixtral 8x7B", "Mixtral 8x22B", "DBRX"],
    "family": "Mixtral",
    "shapes_from": "config.json of mistralai/Mixtral-8x7B-v0.1 and 8x22B: num_local_experts 8, "
                   "num_experts_per_tok 2",
    "precision": "bf16",
    "description": "MoE routing of Mixtral (8 experts, top-2) and DBRX (16 experts, top-4): "
                   "fp32 softmax of the router logits, top-k, renormalized weights in bf16 and "
                   "the expert ids sorted by weight.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 17, "experts": 8, "top_k": 2}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 1, "experts": 16, "top_k": 4}, "cpu": True,
         "visible": False},
        {"name": "cpu_odd2", "params": {"tokens": 131, "experts": 8, "top_k": 2}, "cpu": True,
         "visible": False},
        {"name": "decode_b64_mixtral", "params": {"tokens": 64, "experts": 8, "top_k": 2}},
        {"name": "prefill_8k_mixtral", "params": {"tokens": 8192, "experts": 8, "top_k": 2}},
        {"name": "prefill_16k_dbrx", "params": {"tokens": 16384, "experts": 16, "top_k": 4},
         "visible": False},
    ],
    # softmax (max, exp, sum, divide), the top-k comparisons, the renormalization
    "flops": lambda p: 5 * p["tokens"] * p["experts"] + 3 * p["tokens"] * p["top_k"],
    # fp32 logits in; bf16 weights and int64 ids out
    "bytes": lambda p: 4 * p["tokens"] * p["experts"] + 10 * p["tokens"] * p["top_k"],
    # the ids index the fp32 softmax along the experts: any id whose probability matches
    # the reference's choice within the tolerance passes; ids in a row must be distinct
    "index_outputs": {1: {"from_inputs": lambda logits: F.softmax(logits, dim=1,
                                                                  dtype=torch.float),
                          "dim": -1}},
}


class Model(nn.Module):
    def __init__(self, top_k: int = 2, dtype=torch.bfloat16):
        super().__init__()
        self.top_k = top_k
        self.dtype = dtype

    def forward(self, router_logits: torch.Tensor):
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        return routing_weights.to(self.dtype), selected_experts


def get_inputs(tokens: int = 8192, experts: int = 8):
    return [gen.randn(tokens, experts, dtype=torch.float32, scale=1.5)]


def get_init_inputs(top_k: int = 2, dtype=torch.bfloat16):
    return [top_k, dtype]
