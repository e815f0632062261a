"""The timestep embedder of DiT and Stable Diffusion UNets (DiT TimestepEmbedder, diffusers
Timesteps + TimestepEmbedding): sinusoidal features of the (fractional) timestep, cos half
first, max period 10000, then Linear, SiLU, Linear; fp32 in and out (the embedder runs in
fp32 before the cast to the model's dtype)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "timestep_embedder_dit",
    "category": "L2",
    "models": ["DiT-XL/2", "Stable Diffusion 1.5 UNet", "SDXL UNet"],
    "family": "DiT",
    "shapes_from": "DiT-XL/2 (frequency_embedding_size 256, hidden 1152); unet/config.json of "
                   "runwayml/stable-diffusion-v1-5 (320 sinusoidal channels -> "
                   "time_embed_dim 1280) and SDXL (320 -> 1280)",
    "precision": "tf32",
    "description": "t (b,) -> [cos(t f), sin(t f)] with f_i = 10000^(-i / half) -> fc1 -> SiLU -> "
                   "fc2; (b, hidden).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 3, "freq_dim": 16, "hidden": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "freq_dim": 10, "hidden": 24}, "cpu": True,
         "visible": False},
        {"name": "dit_b256", "params": {"batch": 256, "freq_dim": 256, "hidden": 1152}},
        {"name": "sd15_b2", "params": {"batch": 2, "freq_dim": 320, "hidden": 1280}},
        {"name": "sdxl_b16", "params": {"batch": 16, "freq_dim": 320, "hidden": 1280},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * (p["freq_dim"] * p["hidden"] + p["hidden"] ** 2),
    "bytes": lambda p: 4 * (p["freq_dim"] * p["hidden"] + p["hidden"] ** 2
                            + p["batch"] * (1 + p["hidden"])),
}


class Model(nn.Module):
    def __init__(self, freq_dim: int = 256, hidden: int = 1152):
        super().__init__()
        half = freq_dim // 2
        self.register_buffer("freqs", torch.exp(-math.log(10000.0)
                                                * torch.arange(half, dtype=torch.float32) / half))
        self.fc1, self.fc2 = nn.Linear(freq_dim, hidden), nn.Linear(hidden, hidden)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        args = t.float()[:, None] * self.freqs[None]
        emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.fc2(F.silu(self.fc1(emb)))


def get_inputs(batch: int = 256):
    # diffusion timesteps in [0, 1000), fractional as flow/DDIM schedules give them
    return [gen.uniform(batch, low=0.0, high=999.0)]


def get_init_inputs(freq_dim: int = 256, hidden: int = 1152):
    return [freq_dim, hidden]
