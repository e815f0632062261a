"""layernorm_vit with solforge's Triton LayerNorm: one program per token, two-pass mean and
variance over the row held in registers, fp32 throughout."""

import torch
import torch.nn as nn

from solforge.kernels.triton import layer_norm


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 1024, eps: float = 1e-6):
        super().__init__()
        # holds the weight and bias under the reference's names; forward never calls it
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.norm.weight, self.norm.bias, self.norm.eps)
