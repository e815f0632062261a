"""EfficientNet's MBConv block with squeeze-and-excitation (HF EfficientNetBlock, eval
mode, stride 1 with the residual): 1x1 expansion conv + BN + SiLU, kxk depthwise conv + BN
+ SiLU, squeeze-excite (global average pool, 1x1 reduce + SiLU, 1x1 expand + sigmoid, scale),
1x1 projection + BN, plus the input; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "mbconv_se_efficientnet",
    "category": "L2",
    "models": ["EfficientNet-B0", "EfficientNet-B4"],
    "family": "EfficientNet",
    "shapes_from": "config.json of google/efficientnet-b0 (224px; stage 3: 40 channels, kernel 5, "
                   "expand_ratio 6, 28x28; stage 5: 112 channels, kernel 5, 14x14; "
                   "squeeze_expansion_ratio 0.25) and efficientnet-b4 (380px, width 1.4)",
    "precision": "fp16",
    "description": "x (b, C, H, W) -> SiLU(BN(conv1x1 C->6C)) -> SiLU(BN(dwconv kxk)) -> * "
                   "sigmoid(conv(SiLU(conv(avgpool)))) with C/4 squeeze channels -> BN(conv1x1 "
                   "6C->C) -> + x.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "channels": 8, "size": 8, "kernel": 3},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "channels": 4, "size": 7, "kernel": 5},
         "cpu": True, "visible": False},
        {"name": "b0_stage3_b64", "params": {"batch": 64, "channels": 40, "size": 28,
                                             "kernel": 5}},
        {"name": "b0_stage5_b64", "params": {"batch": 64, "channels": 112, "size": 14,
                                             "kernel": 5}},
        {"name": "b4_stage3_b32", "params": {"batch": 32, "channels": 56, "size": 48,
                                             "kernel": 5}, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["size"] ** 2 * 6 * p["channels"]
    * (2 * p["channels"] + p["kernel"] ** 2),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["channels"] * p["size"] ** 2
                            + 12 * p["channels"] ** 2 + 3 * p["channels"] ** 2),
}


def _bn(n, dtype):
    bn = nn.BatchNorm2d(n, eps=1e-3, dtype=dtype)
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.2)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_(0, 0.2)
    return bn


class Model(nn.Module):
    def __init__(self, channels: int = 40, kernel: int = 5, dtype=torch.float16):
        super().__init__()
        e, s = 6 * channels, max(1, channels // 4)
        self.expand = nn.Conv2d(channels, e, 1, bias=False, dtype=dtype)
        self.bn0 = _bn(e, dtype)
        self.dw = nn.Conv2d(e, e, kernel, padding=kernel // 2, groups=e, bias=False, dtype=dtype)
        self.bn1 = _bn(e, dtype)
        self.se_reduce = nn.Conv2d(e, s, 1, dtype=dtype)
        self.se_expand = nn.Conv2d(s, e, 1, dtype=dtype)
        self.project = nn.Conv2d(e, channels, 1, bias=False, dtype=dtype)
        self.bn2 = _bn(channels, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(self.bn0(self.expand(x)))
        y = F.silu(self.bn1(self.dw(y)))
        se = torch.sigmoid(self.se_expand(F.silu(self.se_reduce(y.mean((2, 3), keepdim=True)))))
        return self.bn2(self.project(y * se)) + x


def get_inputs(batch: int = 64, channels: int = 40, size: int = 28, dtype=torch.float16):
    return [gen.randn(batch, channels, size, size, dtype=dtype)]


def get_init_inputs(channels: int = 40, kernel: int = 5, dtype=torch.float16):
    return [channels, kernel, dtype]
