"""DiT's adaLN-Zero conditioning (facebookresearch/DiT DiTBlock, diffusers AdaLayerNormZero):
the conditioning vector c goes through SiLU and a Linear to 6 * hidden (shift, scale, gate for
attention and MLP); the attention input is LayerNorm(x) (no affine) * (1 + scale) + shift; the
gate for the residual is returned too; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "adaln_modulate_dit",
    "category": "L2",
    "models": ["DiT-XL/2", "PixArt-alpha"],
    "family": "DiT",
    "shapes_from": "facebook/DiT-XL-2-256 transformer config (hidden 1152, 16 heads, patch 2: "
                   "256px -> 32x32 latent -> 256 tokens, 512px -> 1024 tokens); PixArt-alpha "
                   "XL-2 1024px (hidden 1152, 4096 tokens)",
    "precision": "bf16",
    "description": "mod = Linear(SiLU(c)) split into 6 (b, C) chunks; returns (LN(x) * (1 + "
                   "scale_msa) + shift_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "tokens": 8, "dim": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "tokens": 5, "dim": 48}, "cpu": True,
         "visible": False},
        {"name": "xl2_256px_b32", "params": {"batch": 32, "tokens": 256, "dim": 1152}},
        {"name": "xl2_512px_b8", "params": {"batch": 8, "tokens": 1024, "dim": 1152}},
        {"name": "pixart_1024px_b2", "params": {"batch": 2, "tokens": 4096, "dim": 1152},
         "visible": False},
    ],
    "flops": lambda p: 12 * p["batch"] * p["dim"] ** 2 + 8 * p["batch"] * p["tokens"] * p["dim"],
    "bytes": lambda p: 2 * (2 * p["batch"] * p["tokens"] * p["dim"] + 6 * p["dim"] ** 2
                            + 7 * p["batch"] * p["dim"]),
}


class Model(nn.Module):
    def __init__(self, dim: int = 1152, dtype=torch.bfloat16):
        super().__init__()
        self.linear = nn.Linear(dim, 6 * dim, dtype=dtype)
        # trained (no longer zero) modulation: scales of ~0.3
        nn.init.normal_(self.linear.weight, std=0.3 * dim ** -0.5)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, c: torch.Tensor):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            self.linear(F.silu(c)).chunk(6, dim=1)
        h = self.norm(x) * (1 + scale_msa[:, None]) + shift_msa[:, None]
        return h, gate_msa, shift_mlp, scale_mlp, gate_mlp


def get_inputs(batch: int = 32, tokens: int = 256, dim: int = 1152, dtype=torch.bfloat16):
    return [gen.randn(batch, tokens, dim, dtype=dtype), gen.randn(batch, dim, dtype=dtype)]


def get_init_inputs(dim: int = 1152, dtype=torch.bfloat16):
    return [dim, dtype]
