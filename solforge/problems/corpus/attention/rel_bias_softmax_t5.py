"""T5's relative position bias (HF T5Attention.compute_bias) added to the attention scores
before the softmax: the relative distance j - i is bucketed (32 buckets, half per direction
for the bidirectional encoder, exact below 8, logarithmic up to max_distance 128), each
bucket looks up a learned bias per head; fp32 as T5 encoders run."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rel_bias_softmax_t5",
    "category": "attention",
    "models": ["T5 base", "Flan-T5 XL", "T5 v1.1 XXL"],
    "family": "T5",
    "shapes_from": "config.json of google-t5/t5-base (12 heads, relative_attention_num_buckets "
                   "32, relative_attention_max_distance 128, 512 tokens), google/flan-t5-xl (32 "
                   "heads) and google/t5-v1_1-xxl (64 heads)",
    "precision": "fp32",
    "description": "probs = softmax(scores + bias[bucket(j - i)]) over the last dim, with scores "
                   "(batch, heads, q_len, k_len) and the (32, heads) bias table a parameter.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "heads": 2, "q_len": 20, "k_len": 20},
         "cpu": True},
        {"name": "cpu_far", "params": {"batch": 1, "heads": 3, "q_len": 5, "k_len": 160},
         "cpu": True, "visible": False},
        {"name": "encoder_b8_s512_base", "params": {"batch": 8, "heads": 12, "q_len": 512,
                                                    "k_len": 512}},
        {"name": "encoder_b4_s512_xl", "params": {"batch": 4, "heads": 32, "q_len": 512,
                                                  "k_len": 512}},
        {"name": "encoder_b2_s1024_xxl", "params": {"batch": 2, "heads": 64, "q_len": 1024,
                                                    "k_len": 1024}, "visible": False},
    ],
    # add, max, subtract, exp, sum, divide per score
    "flops": lambda p: 6 * p["batch"] * p["heads"] * p["q_len"] * p["k_len"],
    "bytes": lambda p: 4 * 2 * p["batch"] * p["heads"] * p["q_len"] * p["k_len"],
}


def relative_position_bucket(rel: torch.Tensor, num_buckets: int = 32,
                             max_distance: int = 128) -> torch.Tensor:
    """T5's bidirectional bucketing of j - i."""
    num_buckets //= 2
    buckets = (rel > 0).long() * num_buckets
    rel = rel.abs()
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).long()
    large = torch.minimum(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


class Model(nn.Module):
    def __init__(self, heads: int = 12, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.bias = nn.Embedding(num_buckets, heads)
        nn.init.normal_(self.bias.weight, std=2.0)
        self.num_buckets, self.max_distance = num_buckets, max_distance

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        q_len, k_len = scores.shape[-2:]
        ctx = torch.arange(q_len, device=scores.device)[:, None]
        mem = torch.arange(k_len, device=scores.device)[None, :]
        buckets = relative_position_bucket(mem - ctx, self.num_buckets, self.max_distance)
        bias = self.bias(buckets).permute(2, 0, 1)[None]  # (1, heads, q, k)
        return torch.softmax(scores + bias, dim=-1)


def get_inputs(batch: int = 8, heads: int = 12, q_len: int = 512, k_len: int = 512):
    return [gen.randn(batch, heads, q_len, k_len, scale=3.0)]


def get_init_inputs(heads: int = 12):
    return [heads, 32, 128]
