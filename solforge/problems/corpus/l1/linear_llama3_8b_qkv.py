"""Fused QKV projection of Llama 3 8B (4096 -> 32*128 + 2*8*128 = 6144), bf16, no bias."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "linear_llama3_8b_qkv",
    "category": "L1",
    "models": ["Llama 3 8B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "y = x @ W^T with W [6144, 4096]: q, k and v projections fused into one GEMM "
                   "(vLLM QKVParallelLinear; HF runs q_proj, k_proj, v_proj), at decode and "
                   "prefill token counts.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "in_features": 257, "out_features": 509},
         "cpu": True},
        {"name": "decode_m1",
         "params": {"tokens": 1, "in_features": 4096, "out_features": 6144}},
        {"name": "decode_m64",
         "params": {"tokens": 64, "in_features": 4096, "out_features": 6144}, "visible": False},
        {"name": "prefill_m2048",
         "params": {"tokens": 2048, "in_features": 4096, "out_features": 6144}},
        {"name": "prefill_m8192",
         "params": {"tokens": 8192, "in_features": 4096, "out_features": 6144}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "in_features": 509, "out_features": 131},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["in_features"] * p["out_features"],
    # x and W read, y written once (bf16)
    "bytes": lambda p: 2 * (p["tokens"] * p["in_features"] + p["out_features"] * p["in_features"]
                            + p["tokens"] * p["out_features"]),
}


class Model(nn.Module):
    def __init__(self, in_features: int = 4096, out_features: int = 6144, dtype=torch.bfloat16):
        super().__init__()
        self.qkv_proj = nn.Linear(in_features, out_features, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.qkv_proj(x)


def get_inputs(tokens: int = 2048, in_features: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, in_features, dtype=dtype)]


def get_init_inputs(in_features: int = 4096, out_features: int = 6144, dtype=torch.bfloat16):
    return [in_features, out_features, dtype]
