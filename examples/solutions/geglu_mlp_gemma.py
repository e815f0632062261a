"""geglu_mlp_gemma: the three GEMMs stay on cuBLAS (torch), gelu_tanh(gate) * up is one
solforge Triton kernel.

Rounding as eager: the GELU is rounded to bf16 before the product.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.kernels.triton import geglu


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 3072, intermediate: int = 24576, dtype=torch.bfloat16):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=dtype)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False, dtype=dtype)
        for lin in (self.gate_proj, self.up_proj, self.down_proj):
            nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = geglu(F.linear(x, self.gate_proj.weight), F.linear(x, self.up_proj.weight))
        return F.linear(h, self.down_proj.weight)
