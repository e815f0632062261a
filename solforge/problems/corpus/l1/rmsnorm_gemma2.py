"""Gemma 2 RMSNorm: the weight is stored as an offset from 1, y = norm(x) * (1 + w); bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rmsnorm_gemma2",
    "category": "L1",
    "models": ["Gemma 2 2B", "Gemma 2 9B", "Gemma 2 27B"],
    "family": "Gemma 2",
    "shapes_from": "config.json of google/gemma-2-9b (hidden_size 3584), gemma-2-2b (2304) and "
                   "gemma-2-27b (4608), rms_norm_eps 1e-6",
    "precision": "bf16",
    "description": "y = x / sqrt(mean(x^2) + 1e-6) * (1 + w), computed in fp32 and cast back to "
                   "bf16 at the very end (HF Gemma2RMSNorm; unlike Llama the weight multiplies in "
                   "fp32).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "hidden": 257}, "cpu": True},
        {"name": "decode_b32_9b", "params": {"tokens": 32, "hidden": 3584}},
        {"name": "prefill_8k_9b", "params": {"tokens": 8192, "hidden": 3584}},
        {"name": "prefill_4k_27b", "params": {"tokens": 4096, "hidden": 4608}, "visible": False},
        {"name": "decode_b1_2b", "params": {"tokens": 1, "hidden": 2304}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 19, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    # square + sum (2), scale (1), 1 + w and its product (2) per element
    "flops": lambda p: 5 * p["tokens"] * p["hidden"],
    # x read and y written (bf16), w read once
    "bytes": lambda p: 2 * (2 * p["tokens"] * p["hidden"] + p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 3584, eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        # stored as an offset: the effective scale 1 + w is around 1
        self.weight = nn.Parameter((0.1 * torch.randn(hidden)).to(dtype))

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


def get_inputs(tokens: int = 8192, hidden: int = 3584, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 3584, dtype=torch.bfloat16):
    return [hidden, 1e-6, dtype]
