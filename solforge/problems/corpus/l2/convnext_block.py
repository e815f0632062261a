"""A ConvNeXt block (HF ConvNextLayer): 7x7 depthwise conv, LayerNorm over channels
(channels-last), Linear C -> 4C, GELU, Linear 4C -> C, layer scale gamma, and the residual;
fp16 as ConvNeXt inference runs under autocast."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "convnext_block",
    "category": "L2",
    "models": ["ConvNeXt-T", "ConvNeXt-B"],
    "family": "ConvNeXt",
    "shapes_from": "config.json of facebook/convnext-tiny-224 (hidden_sizes [96, 192, 384, 768], "
                   "224px -> stage maps 56, 28, 14, 7, layer_scale_init 1e-6) and "
                   "convnext-base-224 ([128, 256, 512, 1024])",
    "precision": "fp16",
    "description": "x (b, C, H, W) -> dwconv7x7 -> permute to (b, H, W, C) -> LayerNorm(eps 1e-6) "
                   "-> "
                   "pwconv1 -> GELU -> pwconv2 -> * gamma -> permute back -> + x.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "dim": 16, "size": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "dim": 12, "size": 7}, "cpu": True,
         "visible": False},
        {"name": "stage1_b64_tiny", "params": {"batch": 64, "dim": 96, "size": 56}},
        {"name": "stage3_b64_tiny", "params": {"batch": 64, "dim": 384, "size": 14}},
        {"name": "stage2_b32_base", "params": {"batch": 32, "dim": 256, "size": 28},
         "visible": False},
        {"name": "stage4_b1_base", "params": {"batch": 1, "dim": 1024, "size": 7},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["size"] ** 2 * p["dim"] * (49 + 8 * p["dim"]),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["dim"] * p["size"] ** 2 + 8 * p["dim"] ** 2
                            + 49 * p["dim"]),
}


class Model(nn.Module):
    def __init__(self, dim: int = 96, dtype=torch.float16):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim, dtype=dtype)
        self.norm = nn.LayerNorm(dim, eps=1e-6, dtype=dtype)
        self.pwconv1 = nn.Linear(dim, 4 * dim, dtype=dtype)
        self.pwconv2 = nn.Linear(4 * dim, dim, dtype=dtype)
        # a trained model's gamma is far from its 1e-6 init; ~0.5 keeps the branch visible
        self.gamma = nn.Parameter(gen.uniform(dim, low=0.2, high=0.8).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


def get_inputs(batch: int = 64, dim: int = 96, size: int = 56, dtype=torch.float16):
    return [gen.randn(batch, dim, size, size, dtype=dtype)]


def get_init_inputs(dim: int = 96, dtype=torch.float16):
    return [dim, dtype]
