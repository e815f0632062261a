"""A ResNet-50 bottleneck block in inference (torchvision Bottleneck, eval mode): 1x1 conv,
BN, ReLU, 3x3 conv, BN, ReLU, 1x1 conv to 4x width, BN, plus the identity, ReLU; BN uses its
running statistics, so conv and BN fold into one; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "bottleneck_resnet50",
    "category": "L2",
    "models": ["ResNet-50", "ResNet-101"],
    "family": "ResNet",
    "shapes_from": "torchvision resnet50 (Bottleneck, layers [3, 4, 6, 3], widths 64/128/256/512 "
                   "with expansion 4, 224px -> 56/28/14/7 maps); microsoft/resnet-50 config "
                   "hidden_sizes [256, 512, 1024, 2048]",
    "precision": "fp16",
    "description": "x (b, 4w, H, W) -> relu(bn1(conv1x1)) -> relu(bn2(conv3x3)) -> bn3(conv1x1) "
                   "-> relu(+ x); an identity block (no downsample).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "width": 8, "size": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "width": 4, "size": 5}, "cpu": True,
         "visible": False},
        {"name": "layer1_b64", "params": {"batch": 64, "width": 64, "size": 56}},
        {"name": "layer3_b64", "params": {"batch": 64, "width": 256, "size": 14}},
        {"name": "layer2_b256", "params": {"batch": 256, "width": 128, "size": 28},
         "visible": False},
        {"name": "layer4_b1", "params": {"batch": 1, "width": 512, "size": 7}, "visible": False},
    ],
    # 1x1 (4w -> w), 3x3 (w -> w), 1x1 (w -> 4w)
    "flops": lambda p: 2 * p["batch"] * p["size"] ** 2 * p["width"] ** 2 * (4 + 9 + 4),
    "bytes": lambda p: 2 * (2 * p["batch"] * 4 * p["width"] * p["size"] ** 2
                            + 17 * p["width"] ** 2),
}


class Model(nn.Module):
    def __init__(self, width: int = 64, dtype=torch.float16):
        super().__init__()
        c = 4 * width
        self.conv1 = nn.Conv2d(c, width, 1, bias=False, dtype=dtype)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False, dtype=dtype)
        self.conv3 = nn.Conv2d(width, c, 1, bias=False, dtype=dtype)
        self.bn1, self.bn2, self.bn3 = (nn.BatchNorm2d(n, dtype=dtype) for n in (width, width, c))
        with torch.no_grad():
            for bn in (self.bn1, self.bn2, self.bn3):
                bn.running_mean.normal_(0, 0.2)
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.normal_(0, 0.2)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + x)


def get_inputs(batch: int = 64, width: int = 64, size: int = 56, dtype=torch.float16):
    return [gen.randn(batch, 4 * width, size, size, dtype=dtype)]


def get_init_inputs(width: int = 64, dtype=torch.float16):
    return [width, dtype]
