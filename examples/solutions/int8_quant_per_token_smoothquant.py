"""int8_quant_per_token_smoothquant with solforge's Triton per-token int8 quantization: one
program per token, amax, scale and rounded values in one pass over the row."""

import torch
import torch.nn as nn

from solforge.kernels.triton import int8_quant_per_token


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return int8_quant_per_token(x)
