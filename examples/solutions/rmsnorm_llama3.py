"""rmsnorm_llama3 with solforge's Triton RMSNorm: one program per token, the row in registers.

Llama's rounding: the normalised row is rounded to bf16 before the weight multiplies it.
"""

import torch
import torch.nn as nn

from solforge.kernels.triton import rms_norm


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-5, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)
