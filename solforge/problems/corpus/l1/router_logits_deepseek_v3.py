"""MoE router logits of DeepSeek-V3 computed in fp32 (HF DeepseekV3TopkRouter), exact fp32.

Routing picks the top-8 of 256 experts from these logits, so the reference upcasts the bf16
hidden states and gate weight and multiplies in fp32; TF32 is not admitted.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "router_logits_deepseek_v3",
    "category": "L1",
    "models": ["DeepSeek-V3"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "fp32",
    # bf16 x bf16 products are exact in fp32, so bf16 tensor cores with fp32 accumulation
    # meet the fp32 tolerance: the bound must assume them
    "sol_unit": "bf16",
    "description": "logits = F.linear(h.float(), W.float()) with h [tokens, 7168] bf16 and the "
                   "gate W [256, 7168] bf16: a skinny GEMM with fp32 output and exact fp32 "
                   "accumulation.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "hidden": 257, "experts": 16}, "cpu": True},
        {"name": "decode_b64", "params": {"tokens": 64, "hidden": 7168, "experts": 256}},
        {"name": "prefill_4k", "params": {"tokens": 4096, "hidden": 7168, "experts": 256}},
        {"name": "prefill_16k", "params": {"tokens": 16384, "hidden": 7168, "experts": 256},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 509, "experts": 64}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["hidden"] * p["experts"],
    # h and W read once (bf16), logits written (fp32)
    "bytes": lambda p: (2 * (p["tokens"] * p["hidden"] + p["experts"] * p["hidden"])
                        + 4 * p["tokens"] * p["experts"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 7168, experts: int = 256, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter((0.02 * torch.randn(experts, hidden)).to(dtype))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(hidden_states.type(torch.float32),
                                    self.weight.type(torch.float32))


def get_inputs(tokens: int = 4096, hidden: int = 7168, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 7168, experts: int = 256, dtype=torch.bfloat16):
    return [hidden, experts, dtype]
