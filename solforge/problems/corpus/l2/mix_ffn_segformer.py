"""SegFormer's Mix-FFN (HF SegformerMixFFN): Linear C -> 4C, a 3x3 depthwise convolution over
the token grid (the positional signal SegFormer has instead of embeddings), GELU, Linear 4C
-> C; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "mix_ffn_segformer",
    "category": "L2",
    "models": ["SegFormer-B5", "SegFormer-B0"],
    "family": "SegFormer",
    "shapes_from": "config.json of nvidia/segformer-b5-finetuned-ade-640-640 (hidden_sizes [64, "
                   "128, 320, 512], mlp_ratios 4, strides 4/8/16/32: 160x160 tokens at stage 1 "
                   "for 640px) and segformer-b0 (hidden_sizes [32, 64, 160, 256], 512px)",
    "precision": "fp16",
    "description": "x (b, H * W, C) -> fc1 -> view (b, 4C, H, W) -> dwconv3x3 -> flatten -> GELU "
                   "-> "
                   "fc2.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "size": 6, "dim": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "size": 5, "dim": 12}, "cpu": True,
         "visible": False},
        {"name": "b5_stage1_640px_b8", "params": {"batch": 8, "size": 160, "dim": 64}},
        {"name": "b5_stage3_640px_b8", "params": {"batch": 8, "size": 40, "dim": 320}},
        {"name": "b0_stage1_512px_b16", "params": {"batch": 16, "size": 128, "dim": 32},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["size"] ** 2 * (8 * p["dim"] ** 2 + 36 * p["dim"]),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["size"] ** 2 * p["dim"] + 8 * p["dim"] ** 2),
}


class Model(nn.Module):
    def __init__(self, dim: int = 64, size: int = 160, dtype=torch.float16):
        super().__init__()
        self.size = size
        self.fc1 = nn.Linear(dim, 4 * dim, dtype=dtype)
        self.dw = nn.Conv2d(4 * dim, 4 * dim, 3, padding=1, groups=4 * dim, dtype=dtype)
        self.fc2 = nn.Linear(4 * dim, dim, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        h = self.fc1(x)
        h = h.transpose(1, 2).reshape(b, -1, self.size, self.size)
        h = self.dw(h).flatten(2).transpose(1, 2)
        return self.fc2(F.gelu(h))


def get_inputs(batch: int = 8, size: int = 160, dim: int = 64, dtype=torch.float16):
    return [gen.randn(batch, size * size, dim, dtype=dtype)]


def get_init_inputs(dim: int = 64, size: int = 160, dtype=torch.float16):
    return [dim, size, dtype]
