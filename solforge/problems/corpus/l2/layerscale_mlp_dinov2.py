"""A DINOv2 block's MLP half (HF Dinov2Layer): x + gamma * fc2(GELU(fc1(LayerNorm(x)))), with
the learned per-channel layer scale gamma; fp16 as DINOv2 features are extracted."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "layerscale_mlp_dinov2",
    "category": "L2",
    "models": ["DINOv2 ViT-L/14", "DINOv2 ViT-B/14"],
    "family": "DINOv2",
    "shapes_from": "config.json of facebook/dinov2-large (hidden_size 1024, mlp_ratio 4, "
                   "patch_size 14, layerscale_value 1.0; 224px -> 256 patches + CLS = 257 "
                   "tokens, 518px -> 1369 + 1) and dinov2-base (768)",
    "precision": "fp16",
    "description": "x (b, n, C) -> x + gamma * fc2(gelu(fc1(LN(x)))), LN eps 1e-6, hidden 4C.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "tokens": 5, "dim": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "tokens": 3, "dim": 24}, "cpu": True,
         "visible": False},
        {"name": "large_224_b64", "params": {"batch": 64, "tokens": 257, "dim": 1024}},
        {"name": "large_518_b8", "params": {"batch": 8, "tokens": 1370, "dim": 1024}},
        {"name": "base_224_b256", "params": {"batch": 256, "tokens": 257, "dim": 768},
         "visible": False},
    ],
    "flops": lambda p: 16 * p["batch"] * p["tokens"] * p["dim"] ** 2,
    "bytes": lambda p: 2 * (2 * p["batch"] * p["tokens"] * p["dim"] + 8 * p["dim"] ** 2),
}


class Model(nn.Module):
    def __init__(self, dim: int = 1024, dtype=torch.float16):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6, dtype=dtype)
        self.fc1 = nn.Linear(dim, 4 * dim, dtype=dtype)
        self.fc2 = nn.Linear(4 * dim, dim, dtype=dtype)
        nn.init.normal_(self.fc1.weight, std=dim ** -0.5)
        nn.init.normal_(self.fc2.weight, std=(4 * dim) ** -0.5)
        self.gamma = nn.Parameter(gen.uniform(dim, low=0.05, high=1.0).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gamma * self.fc2(F.gelu(self.fc1(self.norm(x))))


def get_inputs(batch: int = 64, tokens: int = 257, dim: int = 1024, dtype=torch.float16):
    return [gen.randn(batch, tokens, dim, dtype=dtype)]


def get_init_inputs(dim: int = 1024, dtype=torch.float16):
    return [dim, dtype]
