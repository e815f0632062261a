"""Global average pooling of ViT patch tokens (timm global_pool='avg', BEiT mean pooling), fp32."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "mean_pool_vit",
    "category": "L1",
    "models": ["ViT-L/16", "ViT-H/14", "BEiT-L"],
    "family": "ViT",
    "shapes_from": "config.json of google/vit-large-patch16-224 (197 tokens, hidden 1024), "
                   "ViT-H/14 and BEiT-L",
    "precision": "fp32",
    "description": "y[b] = mean over the patch tokens of x[b, prefix:, :] (the class token "
                   "skipped), [batch, tokens, hidden] -> [batch, hidden] (timm VisionTransformer "
                   "pooling with global_pool='avg').",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "tokens": 17, "hidden": 257, "prefix": 1},
         "cpu": True},
        {"name": "vit_l16_b1", "params": {"batch": 1, "tokens": 197, "hidden": 1024, "prefix": 1}},
        {"name": "vit_l16_b256", "params": {"batch": 256, "tokens": 197, "hidden": 1024,
                                            "prefix": 1}},
        {"name": "vit_h14_b64", "params": {"batch": 64, "tokens": 257, "hidden": 1280,
                                           "prefix": 1}, "visible": False},
        {"name": "cpu_odd", "params": {"batch": 3, "tokens": 50, "hidden": 509, "prefix": 1},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: p["batch"] * (p["tokens"] - p["prefix"]) * p["hidden"],
    # the patch tokens read once (the class token need not be), the means written (fp32)
    "bytes": lambda p: 4 * (p["batch"] * (p["tokens"] - p["prefix"]) * p["hidden"]
                            + p["batch"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, num_prefix_tokens: int = 1):
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.num_prefix_tokens:].mean(dim=1)


def get_inputs(batch: int = 256, tokens: int = 197, hidden: int = 1024):
    # a per-channel offset, as ViT activations have, so the mean is not ~0
    offset = gen.randn(1, 1, hidden, dtype=torch.float32)
    return [gen.randn(batch, tokens, hidden, dtype=torch.float32) + offset]


def get_init_inputs(prefix: int = 1):
    return [prefix]
