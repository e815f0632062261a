"""GroupNorm backward as Stable Diffusion 1.5's UNet trains it (32 groups; 320 channels at 64x64
latents, 640 at 32x32, 1280 at 16x16): dx, dweight, dbias, bf16 data with fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "groupnorm_bwd_sd_unet",
    "category": "L1",
    "direction": "backward",
    "family": "Stable Diffusion",
    "models": ["Stable Diffusion 1.5 UNet"],
    "shapes_from": "stable-diffusion-v1-5 unet/config.json: block_out_channels [320, 640, "
                   "1280, 1280], norm_num_groups 32, norm_eps 1e-5, sample_size 64 (512 px)",
    "precision": "bf16_grad",
    "description": "Backward of GroupNorm(32, C) on (N, C, H, W): inputs grad_out, x and the "
                   "saved fp32 mean and rstd per (sample, group); returns dx (per group: rstd "
                   "* (d - mean(d) - xhat * mean(d * xhat)), d = g * w[c]), dweight[c] = sum of "
                   "g * xhat and dbias[c] = sum of g over samples and pixels.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "channels": 64, "size": 6}, "cpu": True},
        {"name": "train_b8_c320_64", "params": {"batch": 8, "channels": 320, "size": 64}},
        {"name": "train_b16_c640_32", "params": {"batch": 16, "channels": 640, "size": 32}},
        {"name": "train_b16_c1280_16", "params": {"batch": 16, "channels": 1280, "size": 16},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 3, "channels": 96, "size": 5}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 12 * p["batch"] * p["channels"] * p["size"] ** 2,
    "bytes": lambda p: 6 * p["batch"] * p["channels"] * p["size"] ** 2 + 8 * p["channels"],
}

GROUPS, EPS = 32, 1e-5


class Model(nn.Module):
    def __init__(self, channels: int = 320, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels, dtype=torch.float32).to(dtype))
        self.bias = nn.Parameter((0.1 * torch.randn(channels, dtype=torch.float32)).to(dtype))

    def forward(self, grad_out, x, mean, rstd):
        n, c, h, w = x.shape
        shape = (n, GROUPS, c // GROUPS, h * w)
        g = grad_out.float().reshape(shape)
        xhat = (x.float().reshape(shape) - mean[..., None, None]) * rstd[..., None, None]
        d = g * self.weight.float().reshape(1, GROUPS, c // GROUPS, 1)
        dims = (2, 3)
        dx = rstd[..., None, None] * (d - d.mean(dims, keepdim=True)
                                      - xhat * (d * xhat).mean(dims, keepdim=True))
        return (dx.reshape(x.shape).to(x.dtype),
                (g * xhat).sum((0, 3)).reshape(c).to(self.weight.dtype),
                g.sum((0, 3)).reshape(c).to(self.bias.dtype))


def autograd_forward(model, grad_out, x, mean, rstd):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, w, b):
        return nn.functional.group_norm(x, GROUPS, w, b, EPS)
    return fn, [x, model.weight, model.bias], [grad_out]


def get_inputs(batch: int = 8, channels: int = 320, size: int = 64, dtype=torch.bfloat16):
    x = gen.randn(batch, channels, size, size, dtype=dtype)
    xg = x.float().reshape(batch, GROUPS, -1)  # the forward's saved statistics (fp32)
    mean = xg.mean(-1)
    rstd = torch.rsqrt(xg.var(-1, unbiased=False) + EPS)
    return [gen.randn(batch, channels, size, size, dtype=dtype), x, mean, rstd]


def get_init_inputs(channels: int = 320, dtype=torch.bfloat16):
    return [channels, dtype]
