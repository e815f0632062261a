"""Non-causal self-attention of vision transformers, spelled the eager way (HF SiglipAttention /
CLIPAttention eager path), bf16: odd token counts (729, 577, 1370) and SigLIP's head_dim 72."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "vit_attention_siglip",
    "category": "attention",
    "models": ["SigLIP so400m/14-384", "CLIP ViT-L/14-336", "DINOv2 ViT-g/14"],
    "family": "SigLIP",
    "shapes_from": "config.json of google/siglip-so400m-patch14-384 (16 heads, head_dim 72, 729 "
                   "patches), openai/clip-vit-large-patch14-336 and facebook/dinov2-giant",
    "precision": "bf16",
    "description": "Bidirectional multi-head attention over image tokens: softmax(q k^T * "
                   "d^-0.5) v with fp32 scores and softmax, no mask; q/k/v (batch, heads, tokens, "
                   "d), "
                   "output (batch, tokens, heads, d).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 17, "heads": 3, "head_dim": 24},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "seq": 50, "heads": 2, "head_dim": 72},
         "cpu": True, "visible": False},
        {"name": "siglip_so400m_b16", "params": {"batch": 16, "seq": 729, "heads": 16,
                                                 "head_dim": 72}},
        {"name": "clip_l14_336_b32", "params": {"batch": 32, "seq": 577, "heads": 16,
                                                "head_dim": 64}},
        {"name": "dinov2_g14_518_b8", "params": {"batch": 8, "seq": 1370, "heads": 24,
                                                 "head_dim": 64}, "visible": False},
        {"name": "siglip_so400m_b64", "params": {"batch": 64, "seq": 729, "heads": 16,
                                                 "head_dim": 72}, "visible": False},
    ],
    # QK^T and PV over every (query, key) pair
    "flops": lambda p: 4 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"],
    # q, k, v in and o out (bf16)
    "bytes": lambda p: 8 * p["batch"] * p["heads"] * p["seq"] * p["head_dim"],
}


class Model(nn.Module):
    def __init__(self, head_dim: int = 72):
        super().__init__()
        self.scaling = head_dim ** -0.5

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor):
        # scores in fp32, as fused kernels keep them (bf16 scores would make the reference
        # the least accurate party); the rest is HF's eager_attention_forward
        attn_weights = torch.matmul(query.float(), key.float().transpose(2, 3)) * self.scaling
        attn_weights = nn.functional.softmax(attn_weights, dim=-1,
                                             dtype=torch.float32).to(query.dtype)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output.transpose(1, 2).contiguous()


def get_inputs(batch: int = 16, seq: int = 729, heads: int = 16, head_dim: int = 72,
               dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(head_dim: int = 72):
    return [head_dim]
