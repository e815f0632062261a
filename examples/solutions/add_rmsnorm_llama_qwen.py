"""add_rmsnorm_llama_qwen with solforge's fused residual add + RMSNorm: x and the residual
are read once, the new residual and the normed row written once (vLLM's fused_add_rms_norm,
without its in-place update: the evaluator's inputs must stay untouched)."""

import torch
import torch.nn as nn

from solforge.kernels.triton import add_rms_norm


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        return add_rms_norm(x, residual, self.weight, self.eps)
