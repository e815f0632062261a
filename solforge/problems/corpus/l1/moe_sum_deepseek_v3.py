"""MoE combine: sum of each token's top-k weighted expert outputs (vLLM moe_sum), bf16.

The routing weights are already applied (vLLM multiplies them inside the down-projection
GEMM); what is left is a reduction over the top-k axis.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_sum_deepseek_v3",
    "category": "L1",
    "models": ["DeepSeek-V3", "Mixtral 8x7B"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "bf16",
    "description": "y[t] = sum_k x[t, k] over the top-k expert outputs [tokens, top_k, hidden] "
                   "(DeepSeek-V3: top-8 of 7168, Mixtral: top-2 of 4096); vLLM fused_moe's "
                   "moe_sum.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "top_k": 8, "hidden": 257}, "cpu": True},
        {"name": "decode_b64_dsv3", "params": {"tokens": 64, "top_k": 8, "hidden": 7168}},
        {"name": "prefill_4k_dsv3", "params": {"tokens": 4096, "top_k": 8, "hidden": 7168}},
        {"name": "prefill_8k_mixtral", "params": {"tokens": 8192, "top_k": 2, "hidden": 4096},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "top_k": 3, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: p["tokens"] * (p["top_k"] - 1) * p["hidden"],
    # every expert output read once, the sum written once (bf16)
    "bytes": lambda p: 2 * (p["tokens"] * p["top_k"] * p["hidden"] + p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs(tokens: int = 4096, top_k: int = 8, hidden: int = 7168, dtype=torch.bfloat16):
    # expert outputs already scaled by routing weights of ~1/top_k
    return [gen.randn(tokens, top_k, hidden, dtype=dtype, scale=1.0 / top_k)]


def get_init_inputs():
    return []
