"""First half of a ViT encoder MLP (timm/HF ViTLayer): LayerNorm, fc1 (hidden -> 4*hidden)
with bias, exact (erf) GELU. bf16, as ViTs are served today."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "layernorm_linear_gelu_vit",
    "category": "L2",
    "models": ["ViT-B/16", "ViT-L/16", "ViT-H/14"],
    "family": "ViT",
    "shapes_from": "config.json of google/vit-base-patch16-224 (hidden 768, intermediate 3072, "
                   "197 tokens) and vit-large-patch16-224 (1024, 4096)",
    "precision": "bf16",
    "description": "y = GELU(fc1(LayerNorm(x))) over ViT tokens (197 for 224px/16, 257 for "
                   "224px/14): the pre-norm and the expanding projection of the MLP block.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 17, "hidden": 48, "mlp": 192},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "seq": 5, "hidden": 40, "mlp": 157},
         "cpu": True, "visible": False},
        {"name": "vitb16_b1", "params": {"batch": 1, "seq": 197, "hidden": 768, "mlp": 3072}},
        {"name": "vitl16_b64", "params": {"batch": 64, "seq": 197, "hidden": 1024,
                                          "mlp": 4096}},
        {"name": "vith14_b32", "params": {"batch": 32, "seq": 257, "hidden": 1280,
                                          "mlp": 5120}, "visible": False},
    ],
    # LayerNorm (about 8 per input element), the GEMM, bias + GELU (about 10 per output)
    "flops": lambda p: p["batch"] * p["seq"] * (8 * p["hidden"] + 2 * p["hidden"] * p["mlp"]
                                                + 10 * p["mlp"]),
    # x, norm weight+bias, fc1 weight+bias, output (bf16)
    "bytes": lambda p: 2 * (p["batch"] * p["seq"] * (p["hidden"] + p["mlp"])
                            + 2 * p["hidden"] + p["hidden"] * p["mlp"] + p["mlp"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 768, mlp: int = 3072, eps: float = 1e-6,
                 dtype=torch.bfloat16):
        super().__init__()
        self.norm2 = nn.LayerNorm(hidden, eps=eps, dtype=dtype)
        self.fc1 = nn.Linear(hidden, mlp, dtype=dtype)
        with torch.no_grad():
            self.norm2.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm2.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc1(self.norm2(x)))


def get_inputs(batch: int = 1, seq: int = 197, hidden: int = 768, dtype=torch.bfloat16):
    # the residual stream of a ViT: not centred, larger than unit scale
    return [gen.randn(batch, seq, hidden, dtype=dtype, scale=2.0) + 0.5]


def get_init_inputs(hidden: int = 768, mlp: int = 3072, dtype=torch.bfloat16):
    return [hidden, mlp, 1e-6, dtype]
