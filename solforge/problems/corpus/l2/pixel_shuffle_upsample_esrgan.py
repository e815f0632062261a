"""Real-ESRGAN's sub-pixel upsampler (basicsr's SRVGGNetCompact tail, and the pixel-shuffle
upsample of RRDBNet variants): 3x3 conv to r^2 * C channels, PixelShuffle(r), LeakyReLU(0.2);
fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "pixel_shuffle_upsample_esrgan",
    "category": "L2",
    "models": ["Real-ESRGAN x4plus", "Real-ESRGAN general-x4v3"],
    "family": "Real-ESRGAN",
    "shapes_from": "basicsr RRDBNet / SRVGGNetCompact as Real-ESRGAN configures them: num_feat 64, "
                   "upscale 4 as two 2x stages; 256x256 and 512x512 input tiles",
    "precision": "fp16",
    "description": "x (b, C, H, W) -> conv3x3 C -> 4C -> pixel_shuffle(2) -> leaky_relu(0.2): "
                   "(b, C, 2H, 2W).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "channels": 8, "size": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "channels": 4, "size": 5}, "cpu": True,
         "visible": False},
        {"name": "tile256_b4", "params": {"batch": 4, "channels": 64, "size": 256}},
        {"name": "tile512_b1_stage2", "params": {"batch": 1, "channels": 64, "size": 1024}},
        {"name": "tile512_b1", "params": {"batch": 1, "channels": 64, "size": 512},
         "visible": False},
    ],
    "flops": lambda p: 2 * 9 * 4 * p["batch"] * p["size"] ** 2 * p["channels"] ** 2,
    "bytes": lambda p: 2 * (5 * p["batch"] * p["channels"] * p["size"] ** 2
                            + 36 * p["channels"] ** 2),
}


class Model(nn.Module):
    def __init__(self, channels: int = 64, dtype=torch.float16):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4 * channels, 3, padding=1, dtype=dtype)
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.shuffle(self.conv(x)), 0.2)


def get_inputs(batch: int = 4, channels: int = 64, size: int = 256, dtype=torch.float16):
    return [gen.randn(batch, channels, size, size, dtype=dtype)]


def get_init_inputs(channels: int = 64, dtype=torch.float16):
    return [channels, dtype]
