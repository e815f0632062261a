"""The MLP of CLIP's vision and text towers (HF CLIPMLP, hidden_act quick_gelu): fc1 to 4 x
hidden with bias, QuickGELU x * sigmoid(1.702 x), fc2 back with bias; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "quick_gelu_mlp_clip",
    "category": "L2",
    "models": ["CLIP ViT-L/14", "CLIP ViT-B/16"],
    "family": "CLIP",
    "shapes_from": "config.json of openai/clip-vit-large-patch14 (vision hidden 1024, "
                   "intermediate 4096, 224px / 14 = 256 + 1 tokens; text hidden 768, 3072, 77 "
                   "tokens) and clip-vit-base-patch16 (768, 3072, 197 tokens)",
    "precision": "fp16",
    "description": "x (b, n, H) -> fc2(q(fc1(x))) with q(x) = x * sigmoid(1.702 x).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "tokens": 5, "hidden": 32,
                                         "intermediate": 128}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "tokens": 3, "hidden": 24,
                                       "intermediate": 96}, "cpu": True, "visible": False},
        {"name": "vision_l14_b64", "params": {"batch": 64, "tokens": 257, "hidden": 1024,
                                              "intermediate": 4096}},
        {"name": "text_l14_b1000", "params": {"batch": 1000, "tokens": 77, "hidden": 768,
                                              "intermediate": 3072}},
        {"name": "vision_b16_b256", "params": {"batch": 256, "tokens": 197, "hidden": 768,
                                               "intermediate": 3072}, "visible": False},
    ],
    "flops": lambda p: 4 * p["batch"] * p["tokens"] * p["hidden"] * p["intermediate"],
    "bytes": lambda p: 2 * (2 * p["hidden"] * p["intermediate"]
                            + 2 * p["batch"] * p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 1024, intermediate: int = 4096, dtype=torch.float16):
        super().__init__()
        self.fc1 = nn.Linear(hidden, intermediate, dtype=dtype)
        self.fc2 = nn.Linear(intermediate, hidden, dtype=dtype)
        nn.init.normal_(self.fc1.weight, std=hidden ** -0.5)
        nn.init.normal_(self.fc2.weight, std=intermediate ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(h * torch.sigmoid(1.702 * h))


def get_inputs(batch: int = 64, tokens: int = 257, hidden: int = 1024, dtype=torch.float16):
    return [gen.randn(batch, tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 1024, intermediate: int = 4096, dtype=torch.float16):
    return [hidden, intermediate, dtype]
