"""Nemotron's LayerNorm1P (HF NemotronLayerNorm1P): a LayerNorm whose weight is stored as an
offset from 1 (y = LN(x) * (1 + w) + b, zero-centered gamma), computed in fp32 under autocast
off and cast back; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "layernorm1p_nemotron",
    "category": "L1",
    "models": ["Nemotron-4 15B", "Minitron 8B"],
    "family": "Nemotron",
    "shapes_from": "config.json of nvidia/Minitron-8B-Base (hidden_size 4096, norm_eps 1e-5) and "
                   "Nemotron-4 15B (6144)",
    "precision": "bf16",
    "description": "y = layer_norm(x, weight = 1 + w, bias = b, eps 1e-5) over the last dim, in "
                   "fp32, cast to bf16.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 4, "hidden": 64}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 7, "hidden": 33}, "cpu": True, "visible": False},
        {"name": "decode_b64_15b", "params": {"tokens": 64, "hidden": 6144}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "hidden": 4096}},
        {"name": "prefill_4k_15b", "params": {"tokens": 4096, "hidden": 6144}, "visible": False},
    ],
    "flops": lambda p: 8 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 2 * (2 * p["tokens"] * p["hidden"] + 2 * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-5, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter((0.1 * torch.randn(hidden)).to(dtype))
        self.bias = nn.Parameter((0.1 * torch.randn(hidden)).to(dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x.float(), (x.shape[-1],), 1 + self.weight.float(), self.bias.float(),
                         self.eps)
        return y.to(x.dtype)


def get_inputs(tokens: int = 64, hidden: int = 4096, dtype=torch.bfloat16):
    # a residual stream with a mean offset, so the centering matters
    return [(gen.randn(tokens, hidden) + 0.5).to(dtype)]


def get_init_inputs(hidden: int = 4096, dtype=torch.bfloat16):
    return [hidden, 1e-5, dtype]
