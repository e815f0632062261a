"""The Stable Diffusion VAE decoder's mid-block attention (diffusers Attention with
spatial_norm off, residual_connection on): GroupNorm(32) over the 512-channel latent map,
one head over all H*W positions (q, k, v and output projections with bias), plus the
residual; fp32 as the SDXL VAE is run (fp16 overflows in it)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "vae_mid_attention_sd",
    "category": "L2",
    "models": ["Stable Diffusion 1.5 VAE", "SDXL VAE"],
    "family": "Stable Diffusion VAE",
    "shapes_from": "vae/config.json of stabilityai/sdxl-vae and runwayml/stable-diffusion-v1-5: "
                   "block_out_channels [128, 256, 512, 512], norm_num_groups 32, latent 64x64 at "
                   "512px and 128x128 at 1024px",
    "precision": "tf32",
    "description": "x (b, 512, H, W): y = x + proj(softmax(q k^T / sqrt(512)) v) where q, k, v are "
                   "linear maps of GroupNorm(x) flattened to (b, H*W, 512).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "channels": 64, "size": 6}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "channels": 32, "size": 5}, "cpu": True,
         "visible": False},
        {"name": "sd15_512px_b1", "params": {"batch": 1, "channels": 512, "size": 64}},
        {"name": "sdxl_1024px_b1", "params": {"batch": 1, "channels": 512, "size": 128}},
        {"name": "sd15_512px_b4", "params": {"batch": 4, "channels": 512, "size": 64},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * (4 * p["size"] ** 2 * p["channels"] ** 2
                                         + 2 * p["size"] ** 4 * p["channels"]),
    "bytes": lambda p: 4 * (2 * p["batch"] * p["channels"] * p["size"] ** 2
                            + 4 * p["channels"] ** 2),
}


class Model(nn.Module):
    def __init__(self, channels: int = 512):
        super().__init__()
        self.norm = nn.GroupNorm(32, channels, eps=1e-6)
        self.to_q, self.to_k = nn.Linear(channels, channels), nn.Linear(channels, channels)
        self.to_v, self.to_out = nn.Linear(channels, channels), nn.Linear(channels, channels)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        t = self.norm(x).view(b, c, h * w).transpose(1, 2)
        o = F.scaled_dot_product_attention(self.to_q(t)[:, None], self.to_k(t)[:, None],
                                           self.to_v(t)[:, None])[:, 0]
        return x + self.to_out(o).transpose(1, 2).reshape(b, c, h, w)


def get_inputs(batch: int = 1, channels: int = 512, size: int = 64):
    return [gen.randn(batch, channels, size, size)]


def get_init_inputs(channels: int = 512):
    return [channels]
