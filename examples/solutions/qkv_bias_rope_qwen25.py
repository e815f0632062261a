"""qkv_bias_rope_qwen25: the q/k/v GEMMs on cuBLAS (torch), q and k with their biases;
then solforge Triton kernels build cos/sin from the positions (HF's rotary module), rotate
q and k in one launch, and add v's bias.

The outputs are [batch, heads, seq, head_dim] views of [batch, seq, heads * head_dim]
memory, as the reference's transposes give. q's and k's biases stay in the GEMM (addmm adds
them before rounding, as the reference does): added to the rounded bf16 product instead,
as ``rotary_embedding(q_bias=...)`` can, the extra rounding was amplified by RoPE's
cancellation on outlier inputs past the tolerance in about one trial in a few hundred on
the small CPU workload. v's bias is added after rounding (no rotation follows it).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.kernels.triton import bias_act, rope_cos_sin, rotary_embedding


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 3584, heads: int = 28, kv_heads: int = 4,
                 head_dim: int = 128, rope_theta: float = 1000000.0, dtype=torch.bfloat16):
        super().__init__()
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=True, dtype=dtype)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True, dtype=dtype)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True, dtype=dtype)
        for lin in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)
            nn.init.normal_(lin.bias, std=0.2)
        # the reference's non-persistent buffer: rebuilt the same way, not copied
        inv_freq = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor):
        b, s, _ = hidden_states.shape
        d = self.head_dim
        cos, sin = rope_cos_sin(position_ids, self.inv_freq, hidden_states.dtype)
        q = F.linear(hidden_states, self.q_proj.weight, self.q_proj.bias)
        k = F.linear(hidden_states, self.k_proj.weight, self.k_proj.bias)
        q = q.view(b, s, -1, d).transpose(1, 2)
        k = k.view(b, s, -1, d).transpose(1, 2)
        q, k = rotary_embedding(q, k, cos, sin)
        v = bias_act(F.linear(hidden_states, self.v_proj.weight), self.v_proj.bias, None)
        return q, k, v.view(b, s, -1, d).transpose(1, 2)
