"""The feed-forward of a Stable Diffusion UNet transformer block (diffusers FeedForward with
GEGLU): Linear C -> 8C, split into value and gate halves, value * GELU(gate), Linear 4C ->
C; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "geglu_ff_sd_unet",
    "category": "L2",
    "models": ["Stable Diffusion 1.5 UNet", "SDXL UNet"],
    "family": "Stable Diffusion UNet",
    "shapes_from": "unet/config.json of runwayml/stable-diffusion-v1-5 (block_out_channels "
                   "[320, 640, 1280, 1280]; 512px -> 64x64 latent, transformer at 64x64, 32x32, "
                   "16x16) and SDXL base (640 at 64x64, 1280 at 32x32 for 1024px); mult 4",
    "precision": "fp16",
    "description": "x (b, n, C) -> proj C -> 8C -> (h, g) = chunk(2) -> h * gelu(g) -> Linear 4C "
                   "-> C.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "tokens": 16, "dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "tokens": 9, "dim": 24}, "cpu": True,
         "visible": False},
        {"name": "sd15_64x64_b2", "params": {"batch": 2, "tokens": 4096, "dim": 320}},
        {"name": "sdxl_32x32_b2", "params": {"batch": 2, "tokens": 1024, "dim": 1280}},
        {"name": "sdxl_64x64_b2", "params": {"batch": 2, "tokens": 4096, "dim": 640},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["tokens"] * 12 * p["dim"] ** 2,
    "bytes": lambda p: 2 * (2 * p["batch"] * p["tokens"] * p["dim"] + 12 * p["dim"] ** 2),
}


class Model(nn.Module):
    def __init__(self, dim: int = 320, dtype=torch.float16):
        super().__init__()
        self.proj = nn.Linear(dim, 8 * dim, dtype=dtype)
        self.out = nn.Linear(4 * dim, dim, dtype=dtype)
        nn.init.normal_(self.proj.weight, std=dim ** -0.5)
        nn.init.normal_(self.out.weight, std=(4 * dim) ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, gate = self.proj(x).chunk(2, dim=-1)
        return self.out(h * F.gelu(gate))


def get_inputs(batch: int = 2, tokens: int = 4096, dim: int = 320, dtype=torch.float16):
    return [gen.randn(batch, tokens, dim, dtype=dtype)]


def get_init_inputs(dim: int = 320, dtype=torch.float16):
    return [dim, dtype]
