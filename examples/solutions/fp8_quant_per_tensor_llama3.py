"""fp8_quant_per_tensor_llama3 with solforge's Triton FP8 kernels: an absmax pass (one atomic
max per program), then the quantize pass, which also writes the scale. Two launches, no
torch ops in between; rounding is bit-identical to the reference's on a CPU."""

import torch
import torch.nn as nn

from solforge.kernels.triton import fp8_quant_per_tensor


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return fp8_quant_per_tensor(x)
