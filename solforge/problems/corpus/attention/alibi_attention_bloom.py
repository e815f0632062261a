"""Causal self-attention with ALiBi position biases, as BLOOM runs it (HF BloomAttention):
no rotary embedding; each head adds slope_h * (j - i) to its scores, with BLOOM's slopes
(geometric in the head index, interleaved for head counts that are not a power of two); bf16
inputs, scores and softmax in fp32."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "alibi_attention_bloom",
    "category": "attention",
    "models": ["BLOOM 7B1", "BLOOM 176B"],
    "family": "BLOOM",
    "shapes_from": "config.json of bigscience/bloom-7b1 (hidden_size 4096, n_head 32, head_dim "
                   "128) "
                   "and bigscience/bloom (hidden 14336, n_head 112; 14 heads per GPU at TP 8)",
    "precision": "bf16",
    "description": "softmax(q k^T / sqrt(d) + slope_h * (j - i), causal) v for q, k, v of shape "
                   "(batch, heads, seq, head_dim); the slopes follow BLOOM's build_alibi_tensor "
                   "for the model's total head count (a TP slice takes its heads' slopes).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 17, "heads": 4, "total_heads": 4,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 9, "heads": 6, "total_heads": 6,
                                       "head_dim": 8}, "cpu": True, "visible": False},
        {"name": "prefill_b1_s2048_7b1", "params": {"batch": 1, "seq": 2048, "heads": 32,
                                                    "total_heads": 32, "head_dim": 128}},
        {"name": "prefill_b8_s512_7b1", "params": {"batch": 8, "seq": 512, "heads": 32,
                                                   "total_heads": 32, "head_dim": 128}},
        {"name": "prefill_b1_s2048_176b_tp8", "params": {"batch": 1, "seq": 2048, "heads": 14,
                                                         "total_heads": 112, "head_dim": 128},
         "visible": False},
    ],
    # QK^T and PV over the causal half
    "flops": lambda p: 2 * p["batch"] * p["heads"] * p["seq"] * p["seq"] * p["head_dim"],
    "bytes": lambda p: 2 * 4 * p["batch"] * p["heads"] * p["seq"] * p["head_dim"],
}


def alibi_slopes(total_heads: int) -> torch.Tensor:
    """BLOOM's slopes: 2^(-8/n * i) for the closest power of two n, then the odd steps of 2n."""
    closest = 2 ** math.floor(math.log2(total_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != total_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(total_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float32)


class Model(nn.Module):
    def __init__(self, heads: int = 32, total_heads: int = 32, head_dim: int = 128):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(total_heads)[:heads])
        self.scale = head_dim ** -0.5

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = q.shape[2]
        pos = torch.arange(s, device=q.device)
        rel = (pos[None, :] - pos[:, None]).float()  # j - i, <= 0 where attended
        bias = self.slopes[:, None, None] * rel  # (heads, s, s)
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * self.scale + bias
        scores = scores.masked_fill(rel > 0, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return torch.matmul(probs, v.float()).to(q.dtype)


def get_inputs(batch: int = 1, seq: int = 2048, heads: int = 32, head_dim: int = 128,
               dtype=torch.bfloat16):
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, heads, seq, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs(heads: int = 32, total_heads: int = 32, head_dim: int = 128):
    return [heads, total_heads, head_dim]
