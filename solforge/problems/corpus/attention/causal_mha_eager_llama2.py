"""Causal multi-head attention spelled the eager way (HF LlamaAttention, eager path) for
Llama 2 7B, fp16: matmul, scale, add the causal mask, fp32 softmax, matmul."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "causal_mha_eager_llama2",
    "category": "attention",
    "models": ["Llama 2 7B"],
    "family": "Llama 2",
    "shapes_from": "config.json of meta-llama/Llama-2-7b-hf: 32 heads, head_dim 128, "
                   "max_position_embeddings 4096",
    "precision": "fp16",
    "description": "Eager causal MHA (32 heads of 128, no GQA): fp32 scores q k^T * d^-0.5 "
                   "plus a (seq, seq) mask of finfo.min above the diagonal, softmax in fp32 "
                   "cast back to fp16, times v; output (batch, seq, heads, d). Fused attention "
                   "computes the same thing without the seq x seq matrix.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 17, "heads": 4, "head_dim": 16},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "seq": 43, "heads": 3, "head_dim": 32},
         "cpu": True, "visible": False},
        {"name": "prefill_b16_s512", "params": {"batch": 16, "seq": 512, "heads": 32,
                                                "head_dim": 128}},
        {"name": "prefill_b4_s2048", "params": {"batch": 4, "seq": 2048, "heads": 32,
                                                "head_dim": 128}},
        {"name": "prefill_b1_s4096", "params": {"batch": 1, "seq": 4096, "heads": 32,
                                                "head_dim": 128}, "visible": False},
    ],
    # QK^T and PV over the unmasked (causal) half only
    "flops": lambda p: 2 * p["batch"] * p["heads"] * p["seq"] * (p["seq"] + 1) * p["head_dim"],
    # q, k, v in and o out (fp16)
    "bytes": lambda p: 8 * p["batch"] * p["heads"] * p["seq"] * p["head_dim"],
}


class Model(nn.Module):
    def __init__(self, head_dim: int = 128):
        super().__init__()
        self.scaling = head_dim ** -0.5

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor):
        seq = query.shape[2]
        # scores in fp32, as fused kernels keep them (fp16 scores would make the reference
        # the least accurate party); the rest is HF's eager path
        attn_weights = torch.matmul(query.float(), key.float().transpose(2, 3)) * self.scaling
        causal_mask = torch.full((seq, seq), torch.finfo(attn_weights.dtype).min,
                                 device=query.device).triu(1)
        attn_weights = attn_weights + causal_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1,
                                             dtype=torch.float32).to(query.dtype)
        attn_output = torch.matmul(attn_weights, value)
        return attn_output.transpose(1, 2).contiguous()


def get_inputs(batch: int = 4, seq: int = 2048, heads: int = 32, head_dim: int = 128,
               dtype=torch.float16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(head_dim: int = 128):
    return [head_dim]
