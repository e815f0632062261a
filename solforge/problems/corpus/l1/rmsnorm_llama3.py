"""RMSNorm as in Llama 3 (hidden 4096 for 8B, 8192 for 70B), bf16 activations, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rmsnorm_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "y = x / sqrt(mean(x^2) + eps) * w over the hidden dim; computed in fp32, "
                   "returned in the input dtype (HF LlamaRMSNorm).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 257}, "cpu": True},
        {"name": "decode_b1_8b", "params": {"tokens": 1, "hidden": 4096}},
        {"name": "decode_b64_70b", "params": {"tokens": 64, "hidden": 8192}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "hidden": 4096}, "visible": False},
        {"name": "prefill_4k_70b", "params": {"tokens": 4096, "hidden": 8192}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    # 2 FLOPs per element for x^2 and the sum, 2 more for the scale and the weight
    "flops": lambda p: 4 * p["tokens"] * p["hidden"],
    # x read once and y written once (bf16), w read once
    "bytes": lambda p: 2 * (2 * p["tokens"] * p["hidden"] + p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-5, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def get_inputs(tokens: int = 8192, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 4096, dtype=torch.bfloat16):
    return [hidden, 1e-5, dtype]
