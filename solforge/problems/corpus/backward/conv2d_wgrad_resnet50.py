"""Convolution weight gradient as ResNet-50 trains it (3x3, stride 1, pad 1; layer1's 64
channels at 56x56, layer3's 256 at 14x14): dW = the correlation of the input with the output
gradient, summed over the batch and every pixel; bf16, fp32 accumulation."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "conv2d_wgrad_resnet50",
    "category": "L1",
    "direction": "backward",
    "family": "ResNet",
    "models": ["ResNet-50"],
    "shapes_from": "torchvision resnet50 / microsoft/resnet-50: Bottleneck conv2 is 3x3 "
                   "stride 1 padding 1 with width 64 (layer1, 56x56 at 224 px), 128 (layer2, "
                   "28x28), 256 (layer3, 14x14); batch 64-256 per GPU",
    "precision": "bf16_grad",
    "description": "Weight gradient of y = conv2d(x, W, padding=1), W (C, C, 3, 3), no bias: "
                   "inputs grad_out (N, C, H, W) and x (N, C, H, W); returns dW[o, i, r, s] = "
                   "sum over n, h, w of grad_out[n, o, h, w] * x_padded[n, i, h + r, w + s] (a "
                   "GEMM with K = N * H * W).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "channels": 8, "size": 6}, "cpu": True},
        {"name": "train_b64_layer1", "params": {"batch": 64, "channels": 64, "size": 56}},
        {"name": "train_b128_layer3", "params": {"batch": 128, "channels": 256, "size": 14}},
        {"name": "train_b256_layer2", "params": {"batch": 256, "channels": 128, "size": 28},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 3, "channels": 12, "size": 7}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 2 * 9 * p["batch"] * p["channels"] ** 2 * p["size"] ** 2,
    "bytes": lambda p: 4 * p["batch"] * p["channels"] * p["size"] ** 2
    + 2 * 9 * p["channels"] ** 2,
}


class Model(nn.Module):
    def forward(self, grad_out, x):
        c = x.shape[1]
        return torch.nn.grad.conv2d_weight(x, (c, c, 3, 3), grad_out, padding=1)


def autograd_forward(model, grad_out, x):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    c = x.shape[1]
    w = torch.zeros(c, c, 3, 3, dtype=x.dtype)
    return (lambda w: nn.functional.conv2d(x.double(), w, padding=1)), [w], [grad_out]


def get_inputs(batch: int = 64, channels: int = 64, size: int = 56, dtype=torch.bfloat16):
    # x after BatchNorm + ReLU: nonnegative, as the real conv2 input is
    x = torch.relu(gen.randn(batch, channels, size, size)).to(dtype)
    return [gen.randn(batch, channels, size, size, dtype=dtype), x]


def get_init_inputs():
    return []
