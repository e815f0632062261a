"""Granite 3's residual update and the next RMSNorm (HF GraniteDecoderLayer): the attention
or MLP output joins the residual stream scaled by residual_multiplier (0.22), then the next
sub-layer's RMSNorm (eps 1e-5) is taken; returns both the new residual and the normed input;
bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "scaled_residual_rmsnorm_granite",
    "category": "L2",
    "models": ["Granite 3.0 8B", "Granite 3.1 2B"],
    "family": "Granite",
    "shapes_from": "config.json of ibm-granite/granite-3.0-8b-base (hidden_size 4096, "
                   "residual_multiplier 0.22, rms_norm_eps 1e-5) and granite-3.1-2b-base "
                   "(hidden 2048)",
    "precision": "bf16",
    "description": "r = residual + 0.22 * branch (bf16); y = RMSNorm(r) * w (fp32 norm, cast, then "
                   "the weight); returns (r, y).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "hidden": 64}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 48}, "cpu": True, "visible": False},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "hidden": 4096}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "hidden": 4096}},
        {"name": "prefill_4k_2b", "params": {"tokens": 4096, "hidden": 2048}, "visible": False},
    ],
    "flops": lambda p: 6 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 2 * (4 * p["tokens"] * p["hidden"] + p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, multiplier: float = 0.22, eps: float = 1e-5,
                 dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter((1 + 0.1 * torch.randn(hidden)).to(dtype))
        self.multiplier, self.eps = multiplier, eps

    def forward(self, residual: torch.Tensor, branch: torch.Tensor):
        r = residual + branch * self.multiplier
        rf = r.float()
        y = rf * torch.rsqrt(rf.pow(2).mean(-1, keepdim=True) + self.eps)
        return r, self.weight * y.to(r.dtype)


def get_inputs(tokens: int = 64, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype),
            gen.randn(tokens, hidden, dtype=dtype, scale=2.0)]


def get_init_inputs(hidden: int = 4096, dtype=torch.bfloat16):
    return [hidden, 0.22, 1e-5, dtype]
