"""LayerScale backward as DINOv2's ViT blocks train it (x + gamma * branch(x), no dropout;
ViT-L/14 width 1024, ViT-g/14 1536, 257 tokens per 224x224 image): dbranch and dgamma; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "layerscale_bwd_dinov2",
    "category": "L1",
    "direction": "backward",
    "family": "DINOv2",
    "models": ["DINOv2 ViT-L/14", "DINOv2 ViT-g/14"],
    "shapes_from": "facebook/dinov2-large and dinov2-giant config.json: hidden_size 1024 / "
                   "1536, patch_size 14, image_size 224 (256 patches + class token = 257), "
                   "layerscale_value 1.0 at init (trained values spread)",
    "precision": "bf16_grad",
    "description": "Backward of y = x + gamma * f (Dinov2LayerScale on the attention or MLP "
                   "branch f, dropout-free): inputs grad_y (T, H) and the saved branch output "
                   "f (T, H); returns df = grad_y * gamma and dgamma = the sum over tokens of "
                   "grad_y * f (dx = grad_y passes through unchanged and is not returned).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 2 * 7, "hidden": 64}, "cpu": True},
        {"name": "train_b64_large", "params": {"tokens": 64 * 257, "hidden": 1024}},
        {"name": "train_b32_giant", "params": {"tokens": 32 * 257, "hidden": 1536}},
        {"name": "train_b128_large", "params": {"tokens": 128 * 257, "hidden": 1024},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 3 * 9, "hidden": 120}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 3 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 4 * p["hidden"],
}


class Model(nn.Module):
    def __init__(self, hidden: int = 1024, dtype=torch.bfloat16):
        super().__init__()
        self.gamma = nn.Parameter((0.05 + 0.5 * torch.rand(hidden)).to(dtype))

    def forward(self, grad_y, f):
        g = grad_y.float()
        return ((g * self.gamma.float()).to(f.dtype),
                (g * f.float()).sum(0).to(self.gamma.dtype))


def autograd_forward(model, grad_y, f):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return (lambda f, gamma: gamma * f), [f, model.gamma], [grad_y]


def get_inputs(tokens: int = 64 * 257, hidden: int = 1024, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype), gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 1024, dtype=torch.bfloat16):
    return [hidden, dtype]
