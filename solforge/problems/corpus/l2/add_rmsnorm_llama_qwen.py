"""Fused residual add + RMSNorm of Llama 3 / Qwen 2.5 decoder layers (HF eager code)."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "add_rmsnorm_llama_qwen",
    "category": "L2",
    "models": ["Llama 3 8B", "Llama 3 70B", "Qwen 2.5 7B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672); "
                   "config.json of Qwen/Qwen2.5-7B (hidden_size 3584, intermediate_size 18944, 28 "
                   "heads, 4 kv heads, vocab 152064) and Qwen2.5-72B (hidden 8192)",
    "precision": "bf16",
    "description": "residual = residual + x (in bf16), then RMSNorm of the new residual in fp32 "
                   "times the weight (eps 1e-5 for Llama, 1e-6 for Qwen); returns (normed, "
                   "residual) as vLLM's fused_add_rms_norm.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 257}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 1, "hidden": 509}, "cpu": True,
         "visible": False},
        {"name": "decode_b1_8b", "params": {"tokens": 1, "hidden": 4096, "eps": 1e-5}},
        {"name": "decode_b64_qwen7b", "params": {"tokens": 64, "hidden": 3584}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "hidden": 4096, "eps": 1e-5},
         "visible": False},
        {"name": "prefill_4k_70b", "params": {"tokens": 4096, "hidden": 8192, "eps": 1e-5},
         "visible": False},
    ],
    # the add, the square and sum, the scale and the weight
    "flops": lambda p: 5 * p["tokens"] * p["hidden"],
    # x and residual in, normed and new residual out, the weight once (bf16)
    "bytes": lambda p: 2 * (4 * p["tokens"] * p["hidden"] + p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        residual = residual + x
        dtype = residual.dtype
        h = residual.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype), residual


def get_inputs(tokens: int = 64, hidden: int = 4096, dtype=torch.bfloat16):
    # the residual stream grows larger than a layer's output in deep models
    return [gen.randn(tokens, hidden, dtype=dtype), gen.randn(tokens, hidden, dtype=dtype,
                                                              scale=4.0)]


def get_init_inputs(hidden: int = 4096, eps: float = 1e-6, dtype=torch.bfloat16):
    return [hidden, eps, dtype]
