"""MLP linear layers of fp32 vision transformers (ViT-L/16, ViT-H/14, CLIP ViT-bigG/14), with bias.

fp32 data as timm runs these models by default; the matmul may use TF32 tensor cores (the
``tf32`` precision class), as PyTorch does with ``allow_tf32``.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "linear_fp32_vit_mlp",
    "category": "L1",
    "models": ["ViT-L/16", "ViT-H/14", "CLIP ViT-bigG/14"],
    "family": "ViT",
    "shapes_from": "config.json of google/vit-large-patch16-224 (hidden 1024, intermediate 4096), "
                   "ViT-H/14 and CLIP ViT-bigG/14 (hidden 1664, mlp 8192)",
    "precision": "tf32",
    "description": "y = x @ W^T + b (nn.Linear, fp32) for a ViT MLP's fc1/fc2 over all tokens of a "
                   "batch of images (197 or 257 tokens per image); the bigG fc1 is ~4096^3-sized.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "in_features": 257, "out_features": 509},
         "cpu": True},
        {"name": "vit_l16_fc1_b1",
         "params": {"tokens": 197, "in_features": 1024, "out_features": 4096}},
        {"name": "clip_bigg14_fc1_b16",
         "params": {"tokens": 16 * 257, "in_features": 1664, "out_features": 8192}},
        {"name": "vit_h14_fc2_b16",
         "params": {"tokens": 16 * 257, "in_features": 5120, "out_features": 1280},
         "visible": False},
        {"name": "clip_bigg14_fc2_b16",
         "params": {"tokens": 16 * 257, "in_features": 8192, "out_features": 1664},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 17, "in_features": 509, "out_features": 263},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["in_features"] * p["out_features"],
    # x, W and b read, y written once (fp32)
    "bytes": lambda p: 4 * (p["tokens"] * p["in_features"] + p["out_features"] * p["in_features"]
                            + p["out_features"] + p["tokens"] * p["out_features"]),
}


class Model(nn.Module):
    def __init__(self, in_features: int = 1664, out_features: int = 8192):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def get_inputs(tokens: int = 16 * 257, in_features: int = 1664):
    return [gen.randn(tokens, in_features, dtype=torch.float32)]


def get_init_inputs(in_features: int = 1664, out_features: int = 8192):
    return [in_features, out_features]
