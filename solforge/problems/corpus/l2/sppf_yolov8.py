"""YOLOv8's SPPF block (ultralytics nn/modules/block.py SPPF, fused Conv = conv + BN folded
+ SiLU): 1x1 conv to C/2 + SiLU, three chained 5x5 stride-1 max pools, concatenation of the
four maps, 1x1 conv to C + SiLU; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "sppf_yolov8",
    "category": "L2",
    "models": ["YOLOv8n", "YOLOv8l", "YOLOv8x"],
    "family": "YOLO",
    "shapes_from": "ultralytics yolov8.yaml: SPPF [1024, 5] at the P5/32 level, width multiples "
                   "0.25 (n: 256 ch), 1.0 (l: 512 ch, max_channels 512), 1.25 (x: 640); 640px "
                   "-> 20x20 map",
    "precision": "fp16",
    "description": "x (b, C, H, W) -> a = silu(cv1(x)) (C/2) -> m1 = pool(a), m2 = pool(m1), "
                   "m3 = pool(m2) with maxpool k5 s1 p2 -> silu(cv2(cat(a, m1, m2, m3))).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "channels": 8, "size": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "channels": 6, "size": 5}, "cpu": True,
         "visible": False},
        {"name": "v8l_640_b16", "params": {"batch": 16, "channels": 512, "size": 20}},
        {"name": "v8x_1280_b4", "params": {"batch": 4, "channels": 640, "size": 40}},
        {"name": "v8n_640_b64", "params": {"batch": 64, "channels": 256, "size": 20},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["size"] ** 2 * (p["channels"] ** 2 / 2
                                                          + 2 * p["channels"] ** 2),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["channels"] * p["size"] ** 2
                            + 2.5 * p["channels"] ** 2),
}


class Model(nn.Module):
    def __init__(self, channels: int = 512, dtype=torch.float16):
        super().__init__()
        c_ = channels // 2
        self.cv1 = nn.Conv2d(channels, c_, 1, dtype=dtype)
        self.cv2 = nn.Conv2d(4 * c_, channels, 1, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.silu(self.cv1(x))
        m1 = F.max_pool2d(a, 5, 1, 2)
        m2 = F.max_pool2d(m1, 5, 1, 2)
        m3 = F.max_pool2d(m2, 5, 1, 2)
        return F.silu(self.cv2(torch.cat((a, m1, m2, m3), 1)))


def get_inputs(batch: int = 16, channels: int = 512, size: int = 20, dtype=torch.float16):
    return [gen.randn(batch, channels, size, size, dtype=dtype)]


def get_init_inputs(channels: int = 512, dtype=torch.float16):
    return [channels, dtype]
