"""The token permutation before grouped expert GEMMs (as vLLM's moe_permute / Megatron's
permute do for Qwen3-MoE): each token is copied once per chosen expert, and the copies are
ordered by expert id, ties by token order (a stable sort of the flattened routing ids), so
each expert's rows are contiguous; returns the permuted rows and the per-expert counts; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_permute_qwen3_moe",
    "category": "L1",
    "models": ["Qwen3 30B-A3B", "Qwen3 235B-A22B"],
    "family": "Qwen3-MoE",
    "shapes_from": "config.json of Qwen/Qwen3-30B-A3B (hidden 2048, 128 experts, top-8) and "
                   "Qwen3-235B-A22B (hidden 4096, 128 experts, top-8)",
    "precision": "bf16",
    "description": "x (tokens, H), ids (tokens, k) -> (x[order // k] (tokens * k, H), "
                   "bincount(ids, E)) with order = stable argsort of ids.flatten().",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 16, "experts": 6, "top_k": 2},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 8, "experts": 4, "top_k": 3},
         "cpu": True, "visible": False},
        {"name": "decode_b64_30b", "params": {"tokens": 64, "hidden": 2048, "experts": 128,
                                              "top_k": 8}},
        {"name": "prefill_8k_30b", "params": {"tokens": 8192, "hidden": 2048, "experts": 128,
                                              "top_k": 8}},
        {"name": "prefill_4k_235b", "params": {"tokens": 4096, "hidden": 4096, "experts": 128,
                                               "top_k": 8}, "visible": False},
    ],
    "flops": lambda p: 0,
    "bytes": lambda p: 2 * p["tokens"] * p["hidden"] * (1 + p["top_k"])
    + 8 * p["tokens"] * p["top_k"] + 8 * p["experts"],
}


class Model(nn.Module):
    def __init__(self, experts: int = 128):
        super().__init__()
        self.experts = experts

    def forward(self, x: torch.Tensor, ids: torch.Tensor):
        k = ids.shape[1]
        flat = ids.reshape(-1)
        order = torch.sort(flat, stable=True).indices
        return x[order // k], torch.bincount(flat, minlength=self.experts)


def get_inputs(tokens: int = 64, hidden: int = 2048, experts: int = 128, top_k: int = 8,
               dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype), gen.routing_ids(tokens, experts, top_k)]


def get_init_inputs(experts: int = 128):
    return [experts]
