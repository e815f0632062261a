"""Multi-head latent attention (MLA) decode of DeepSeek-V3 in its weight-absorbed form (the
computation FlashMLA runs), bf16: all heads attend over one shared compressed KV cache."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen


def _cached_tokens(p):
    """Expected total valid cache length: gen.lengths draws U[1, max] with one sequence full."""
    return (p["batch"] - 1) * (1 + p["max_len"]) / 2 + p["max_len"]


def _softmax_scale():
    """DeepSeek-V3: qk_head_dim 128 + 64, times yarn's mscale^2 (factor 40, mscale_all_dim 1)."""
    mscale = 0.1 * 1.0 * math.log(40) + 1.0
    return (128 + 64) ** -0.5 * mscale * mscale


SOLFORGE = {
    "name": "mla_decode_deepseek_v3",
    "category": "attention",
    "models": ["DeepSeek-V3", "DeepSeek-R1", "Kimi K2"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "bf16",
    "description": "One query token per sequence, each head scoring the latent cache: "
                   "s = (q_nope . c_kv + q_pe . k_pe) * scale over the first seq_lens[b] slots "
                   "(kv_lora_rank 512, rope dim 64), fp32 softmax, out = p . c_kv per head "
                   "(batch, heads, 512). 128 heads at TP 1, 16 at TP 8.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "max_len": 19, "heads": 4, "rank": 32,
                                         "rope_dim": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "max_len": 11, "heads": 5, "rank": 24,
                                       "rope_dim": 8}, "cpu": True, "visible": False},
        {"name": "decode_b64_s4096_tp1", "params": {"batch": 64, "max_len": 4096, "heads": 128,
                                                    "rank": 512, "rope_dim": 64}},
        {"name": "decode_b1_s16384_tp1", "params": {"batch": 1, "max_len": 16384,
                                                    "heads": 128, "rank": 512,
                                                    "rope_dim": 64}},
        {"name": "decode_b128_s8192_tp8", "params": {"batch": 128, "max_len": 8192,
                                                     "heads": 16, "rank": 512,
                                                     "rope_dim": 64}, "visible": False},
    ],
    # scores over rank + rope dims, PV over rank dims, valid slots only
    "flops": lambda p: 2 * p["heads"] * (2 * p["rank"] + p["rope_dim"]) * _cached_tokens(p),
    # queries, the valid part of the latent cache once, output (bf16), int32 lengths
    "bytes": lambda p: 2 * (p["batch"] * p["heads"] * (2 * p["rank"] + p["rope_dim"])
                            + (p["rank"] + p["rope_dim"]) * _cached_tokens(p)) + 4 * p["batch"],
}


class Model(nn.Module):
    def __init__(self, softmax_scale: float = _softmax_scale()):
        super().__init__()
        self.softmax_scale = softmax_scale

    def forward(self, q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                kpe_cache: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        # q_nope (b, h, rank) is already multiplied by W_UK; the caches are (b, max_len, .)
        # scores in fp32, as FlashMLA keeps them
        scores = (torch.matmul(q_nope.float(), ckv_cache.float().transpose(1, 2))
                  + torch.matmul(q_pe.float(), kpe_cache.float().transpose(1, 2)))
        scores = scores * self.softmax_scale
        slots = torch.arange(ckv_cache.shape[1], device=scores.device)
        valid = (slots[None, :] < seq_lens[:, None])[:, None, :]  # (b, 1, max_len)
        scores = scores.masked_fill(~valid, torch.finfo(scores.dtype).min)
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q_nope.dtype)
        return torch.matmul(probs, ckv_cache)  # (b, h, rank); W_UV is applied afterwards


def get_inputs(batch: int = 64, max_len: int = 4096, heads: int = 128, rank: int = 512,
               rope_dim: int = 64, dtype=torch.bfloat16):
    # scores of std about 2.3 after the 0.135 scale: attention neither flat nor one-hot
    q_nope = gen.randn(batch, heads, rank, dtype=dtype, scale=0.7)
    q_pe = gen.randn(batch, heads, rope_dim, dtype=dtype, scale=0.7)
    ckv_cache = gen.randn(batch, max_len, rank, dtype=dtype)
    kpe_cache = gen.randn(batch, max_len, rope_dim, dtype=dtype)
    seq_lens = gen.lengths(batch, max_len)
    return [q_nope, q_pe, ckv_cache, kpe_cache, seq_lens]


def get_init_inputs():
    return [_softmax_scale()]
