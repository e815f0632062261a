"""The Stable Diffusion VAE decoder's upsampler (diffusers Upsample2D with use_conv): nearest
2x upsampling followed by a 3x3 convolution with bias; fp32 as the SDXL VAE runs."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "upsample_conv_sd_vae",
    "category": "L2",
    "models": ["SDXL VAE", "Stable Diffusion 1.5 VAE"],
    "family": "Stable Diffusion VAE",
    "shapes_from": "vae/config.json of stabilityai/sdxl-vae (block_out_channels [128, 256, 512, "
                   "512]: the decoder upsamples 512 ch at 128 -> 256 and 256 -> 512, then 256 ch "
                   "at 512 -> 1024 for a 1024px image)",
    "precision": "tf32",
    "description": "x (b, C, H, W) -> nearest interpolate to (2H, 2W) -> conv3x3 C -> C, pad 1.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "channels": 8, "size": 6}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "channels": 4, "size": 5}, "cpu": True,
         "visible": False},
        {"name": "sdxl_up1_512c_128", "params": {"batch": 1, "channels": 512, "size": 128}},
        {"name": "sdxl_up3_256c_512", "params": {"batch": 1, "channels": 256, "size": 512}},
        {"name": "sd15_up1_512c_64_b4", "params": {"batch": 4, "channels": 512, "size": 64},
         "visible": False},
    ],
    "flops": lambda p: 2 * 9 * p["batch"] * 4 * p["size"] ** 2 * p["channels"] ** 2,
    "bytes": lambda p: 4 * (5 * p["batch"] * p["channels"] * p["size"] ** 2
                            + 9 * p["channels"] ** 2),
}


class Model(nn.Module):
    def __init__(self, channels: int = 512):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def get_inputs(batch: int = 1, channels: int = 512, size: int = 128):
    return [gen.randn(batch, channels, size, size)]


def get_init_inputs(channels: int = 512):
    return [channels]
