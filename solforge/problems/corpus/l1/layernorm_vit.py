"""LayerNorm of a ViT block (timm ViT-L/16 and ViT-H/14, eps 1e-6), fp32 activations."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "layernorm_vit",
    "category": "L1",
    "models": ["ViT-L/16", "ViT-H/14"],
    "family": "ViT",
    "shapes_from": "config.json of google/vit-large-patch16-224 (hidden 1024, 197 tokens) and "
                   "ViT-H/14 (hidden 1280, 257 tokens)",
    "precision": "fp32",
    "description": "y = (x - mean(x)) / sqrt(var(x) + eps) * w + b over the hidden dim of every "
                   "token (nn.LayerNorm, eps 1e-6, as timm's ViT norm1/norm2), fp32 end to end.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 257}, "cpu": True},
        {"name": "vit_l16_b1", "params": {"tokens": 197, "hidden": 1024}},
        {"name": "vit_l16_b256", "params": {"tokens": 256 * 197, "hidden": 1024}},
        {"name": "vit_h14_b64", "params": {"tokens": 64 * 257, "hidden": 1280}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 53, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    # mean (1), centre + square + sum (3), normalise (2), affine (2) per element
    "flops": lambda p: 8 * p["tokens"] * p["hidden"],
    # x read, y written, w and b read (fp32)
    "bytes": lambda p: 4 * (2 * p["tokens"] * p["hidden"] + 2 * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 1024, eps: float = 1e-6):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.02 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs(tokens: int = 256 * 197, hidden: int = 1024):
    return [gen.randn(tokens, hidden, dtype=torch.float32)]


def get_init_inputs(hidden: int = 1024):
    return [hidden, 1e-6]
