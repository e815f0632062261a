"""rope_llama3 with solforge's Triton rotary embedding: q and k rotated in one launch, each
token's cos/sin row loaded once and shared by all of its heads.

Eager rounding is kept: q*cos and rotate_half(q)*sin are each rounded to bf16, then summed.
"""

import torch.nn as nn

from solforge.kernels.triton import rotary_embedding


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, cos, sin):
        return rotary_embedding(q, k, cos, sin)
