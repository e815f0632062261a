"""Swin's patch merging between stages (HF SwinPatchMerging): each 2x2 neighbourhood of the
(H, W, C) map is concatenated into 4C features (in the order x0 = (0,0), x1 = (1,0), x2 =
(0,1), x3 = (1,1)), LayerNorm over 4C, then a bias-free Linear 4C -> 2C; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "patch_merging_swin",
    "category": "L2",
    "models": ["Swin-T", "Swin-B"],
    "family": "Swin",
    "shapes_from": "config.json of microsoft/swin-tiny-patch4-window7-224 (embed_dim 96: merges "
                   "at 56x56x96, 28x28x192, 14x14x384) and swin-base-patch4-window7-224 (128)",
    "precision": "fp16",
    "description": "x (b, H * W, C) -> (b, H/2 * W/2, 4C) by 2x2 gather -> LayerNorm(4C) -> "
                   "reduction (4C -> 2C).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "size": 8, "dim": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "size": 6, "dim": 12}, "cpu": True,
         "visible": False},
        {"name": "stage1_b64_tiny", "params": {"batch": 64, "size": 56, "dim": 96}},
        {"name": "stage2_b64_tiny", "params": {"batch": 64, "size": 28, "dim": 192}},
        {"name": "stage3_b32_base", "params": {"batch": 32, "size": 14, "dim": 512},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * (p["size"] // 2) ** 2 * 4 * p["dim"] * 2 * p["dim"],
    "bytes": lambda p: 2 * (p["batch"] * p["size"] ** 2 * p["dim"]
                            + p["batch"] * (p["size"] // 2) ** 2 * 2 * p["dim"]
                            + 8 * p["dim"] ** 2),
}


class Model(nn.Module):
    def __init__(self, dim: int = 96, size: int = 56, dtype=torch.float16):
        super().__init__()
        self.size = size
        self.norm = nn.LayerNorm(4 * dim, dtype=dtype)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False, dtype=dtype)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, c = x.shape
        h = w = self.size
        x = x.view(b, h, w, c)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]],
                      dim=-1).view(b, -1, 4 * c)
        return self.reduction(self.norm(x))


def get_inputs(batch: int = 64, size: int = 56, dim: int = 96, dtype=torch.float16):
    return [gen.randn(batch, size * size, dim, dtype=dtype)]


def get_init_inputs(dim: int = 96, size: int = 56, dtype=torch.float16):
    return [dim, size, dtype]
