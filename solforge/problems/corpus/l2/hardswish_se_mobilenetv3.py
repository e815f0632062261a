"""MobileNetV3's inverted residual with hard-swish and hard-sigmoid squeeze-excite
(torchvision InvertedResidual, eval mode): 1x1 expand + BN + hardswish, kxk depthwise + BN,
SE with ReLU and hardsigmoid gates, hardswish, 1x1 project + BN, plus the input; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "hardswish_se_mobilenetv3",
    "category": "L2",
    "models": ["MobileNetV3-Large"],
    "family": "MobileNetV3",
    "shapes_from": "torchvision mobilenet_v3_large inverted_residual_setting: (80 -> 480 exp, "
                   "k3, 14x14, HS), (112 -> 672, k3, SE, HS, 14x14), (160 -> 960, k5, SE, HS, "
                   "7x7) at 224px; SE squeeze to make_divisible(exp / 4, 8)",
    "precision": "fp16",
    "description": "x (b, C, H, W) -> hardswish(BN(conv1x1 C->E)) -> BN(dwconv kxk) -> * "
                   "hardsigmoid(conv(relu(conv(avgpool)))) -> hardswish -> BN(conv1x1 E->C) -> "
                   "+ x.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "channels": 8, "expand": 24, "size": 8,
                                         "kernel": 3}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "channels": 6, "expand": 16, "size": 5,
                                       "kernel": 5}, "cpu": True, "visible": False},
        {"name": "block11_b128", "params": {"batch": 128, "channels": 112, "expand": 672,
                                            "size": 14, "kernel": 3}},
        {"name": "block14_b128", "params": {"batch": 128, "channels": 160, "expand": 960,
                                            "size": 7, "kernel": 5}},
        {"name": "block11_b1", "params": {"batch": 1, "channels": 112, "expand": 672,
                                          "size": 14, "kernel": 3}, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["size"] ** 2 * p["expand"]
    * (2 * p["channels"] + p["kernel"] ** 2),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["channels"] * p["size"] ** 2
                            + 2 * p["expand"] * p["channels"] + p["expand"] ** 2 // 2),
}


def _bn(n, dtype):
    bn = nn.BatchNorm2d(n, eps=1e-3, dtype=dtype)
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.2)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_(0, 0.2)
    return bn


def _divisible(v: float, d: int = 8) -> int:
    return max(d, int(v + d / 2) // d * d)


class Model(nn.Module):
    def __init__(self, channels: int = 112, expand: int = 672, kernel: int = 3,
                 dtype=torch.float16):
        super().__init__()
        sq = _divisible(expand / 4)
        self.expand = nn.Conv2d(channels, expand, 1, bias=False, dtype=dtype)
        self.bn0 = _bn(expand, dtype)
        self.dw = nn.Conv2d(expand, expand, kernel, padding=kernel // 2, groups=expand,
                            bias=False, dtype=dtype)
        self.bn1 = _bn(expand, dtype)
        self.fc1 = nn.Conv2d(expand, sq, 1, dtype=dtype)
        self.fc2 = nn.Conv2d(sq, expand, 1, dtype=dtype)
        self.project = nn.Conv2d(expand, channels, 1, bias=False, dtype=dtype)
        self.bn2 = _bn(channels, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(self.bn0(self.expand(x)))
        y = self.bn1(self.dw(y))
        y = y * F.hardsigmoid(self.fc2(F.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
        return self.bn2(self.project(F.hardswish(y))) + x


def get_inputs(batch: int = 128, channels: int = 112, size: int = 14, dtype=torch.float16):
    return [gen.randn(batch, channels, size, size, dtype=dtype)]


def get_init_inputs(channels: int = 112, expand: int = 672, kernel: int = 3,
                    dtype=torch.float16):
    return [channels, expand, kernel, dtype]
