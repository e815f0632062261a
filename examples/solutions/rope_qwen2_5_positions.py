"""rope_qwen2_5_positions with solforge's Triton rotary embedding reading the cos/sin cache by
position inside the kernel: no gathered cos/sin tensor, no torch.cat of the halves.

The flat [tokens, heads * head_dim] tensors are passed as [1, heads, tokens, head_dim]
views; the outputs keep that layout, so the reshape back is free.
"""

import torch
import torch.nn as nn

from solforge.kernels.triton import rotary_embedding


class ModelNew(nn.Module):
    def __init__(self, head_dim: int = 128, max_pos: int = 32768, base: float = 1e6,
                 dtype=torch.bfloat16):
        super().__init__()
        self.head_size = head_dim
        # the same cache as the reference's (a non-persistent buffer, so rebuilt, not copied)
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        t = torch.arange(max_pos, dtype=torch.float)
        freqs = torch.einsum("i,j -> ij", t, inv_freq)
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward(self, positions, query, key):
        t, d = positions.numel(), self.head_size
        half = d // 2
        cos, sin = self.cos_sin_cache[:, :half], self.cos_sin_cache[:, half:]
        q = query.view(1, t, -1, d).transpose(1, 2)
        k = key.view(1, t, -1, d).transpose(1, 2)
        qo, ko = rotary_embedding(q, k, cos, sin, positions.view(1, t))
        return qo.transpose(1, 2).reshape(query.shape), ko.transpose(1, 2).reshape(key.shape)
