"""Middle of a Stable Diffusion UNet ResNet block (diffusers ResnetBlock2D), fp16:
3x3 conv, + projected time embedding, GroupNorm(32 groups), SiLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "conv_groupnorm_silu_sd_unet",
    "category": "L2",
    "models": ["Stable Diffusion 1.5", "Stable Diffusion XL"],
    "family": "Stable Diffusion UNet",
    "shapes_from": "unet/config.json of runwayml/stable-diffusion-v1-5: block_out_channels [320, "
                   "640, 1280, 1280], norm_num_groups 32, 64x64 latents at 512px",
    "precision": "fp16",
    "description": "h = conv3x3(x) + temb[:, :, None, None]; GroupNorm(32, eps 1e-5) with "
                   "affine weights; SiLU. The conv1 -> norm2 -> act path of the UNet's "
                   "ResnetBlock2D; batch 2 is classifier-free guidance.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "cin": 32, "cout": 64, "height": 9,
                                         "width": 9}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "cin": 64, "cout": 96, "height": 7,
                                       "width": 11}, "cpu": True, "visible": False},
        {"name": "sd15_b2_c320_64x64", "params": {"batch": 2, "cin": 320, "cout": 320,
                                                  "height": 64, "width": 64}},
        {"name": "sd15_b2_c320to640_32x32", "params": {"batch": 2, "cin": 320, "cout": 640,
                                                       "height": 32, "width": 32}},
        {"name": "sd15_b8_c1280_16x16", "params": {"batch": 8, "cin": 1280, "cout": 1280,
                                                   "height": 16, "width": 16},
         "visible": False},
        {"name": "sdxl_b2_c320_128x128", "params": {"batch": 2, "cin": 320, "cout": 320,
                                                    "height": 128, "width": 128},
         "visible": False},
    ],
    # the conv, then about 12 FLOPs per output element for temb, GroupNorm and SiLU
    "flops": lambda p: 2 * p["batch"] * p["cout"] * p["height"] * p["width"] * p["cin"] * 9
    + 12 * p["batch"] * p["cout"] * p["height"] * p["width"],
    # x, temb, conv weight+bias, norm weight+bias, output (fp16)
    "bytes": lambda p: 2 * (p["batch"] * p["height"] * p["width"] * (p["cin"] + p["cout"])
                            + 9 * p["cin"] * p["cout"] + 3 * p["cout"]
                            + p["batch"] * p["cout"]),
}


class Model(nn.Module):
    def __init__(self, cin: int = 320, cout: int = 320, groups: int = 32, eps: float = 1e-5,
                 dtype=torch.float16):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, kernel_size=3, stride=1, padding=1, dtype=dtype)
        self.norm2 = nn.GroupNorm(groups, cout, eps=eps, affine=True, dtype=dtype)
        with torch.no_grad():
            self.norm2.weight.copy_(1.0 + 0.1 * torch.randn(cout))
            self.norm2.bias.copy_(0.1 * torch.randn(cout))

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(x)
        h = h + temb[:, :, None, None]
        h = self.norm2(h)
        return F.silu(h)


def get_inputs(batch: int = 2, cin: int = 320, cout: int = 320, height: int = 64,
               width: int = 64, dtype=torch.float16):
    x = gen.randn(batch, cin, height, width, dtype=dtype)
    temb = gen.randn(batch, cout, dtype=dtype, scale=0.5)  # time_emb_proj(silu(temb))
    return [x, temb]


def get_init_inputs(cin: int = 320, cout: int = 320, dtype=torch.float16):
    return [cin, cout, 32, 1e-5, dtype]
