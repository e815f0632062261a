"""layernorm_linear_gelu_vit: solforge's Triton LayerNorm, the fc1 GEMM on cuBLAS (torch)
without its bias, then the bias + exact GELU as one Triton epilogue pass.

The bias is added to the rounded bf16 GEMM output (eager's addmm adds it before rounding):
one extra bf16 rounding, well inside the bf16 tolerance.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.kernels.triton import bias_act, layer_norm


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 768, mlp: int = 3072, eps: float = 1e-6,
                 dtype=torch.bfloat16):
        super().__init__()
        # holds the norm's weight and bias under the reference's names; never called
        self.norm2 = nn.LayerNorm(hidden, eps=eps, dtype=dtype)
        self.fc1 = nn.Linear(hidden, mlp, dtype=dtype)
        with torch.no_grad():
            self.norm2.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm2.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = layer_norm(x, self.norm2.weight, self.norm2.bias, self.norm2.eps)
        return bias_act(F.linear(h, self.fc1.weight), self.fc1.bias, "gelu")
