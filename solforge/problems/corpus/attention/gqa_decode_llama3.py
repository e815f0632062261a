"""Grouped-query attention for decode against a padded KV cache of ragged lengths, as Llama 3
runs it with HF's static cache (sdpa with a padding mask over the cache slots), bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen


def _cached_tokens(p):
    """Expected total valid cache length: gen.lengths draws U[1, max] with one sequence full."""
    return (p["batch"] - 1) * (1 + p["max_len"]) / 2 + p["max_len"]


SOLFORGE = {
    "name": "gqa_decode_llama3",
    "category": "attention",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "One query token per sequence attends to the first seq_lens[b] slots of its "
                   "KV cache (batch, kv_heads, max_len, d); slots past the length are padding "
                   "and must be ignored. 32 q heads share 8 k/v heads (70B at TP 8: 8 and 1).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 3, "max_len": 37, "heads": 4, "kv_heads": 2,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_one_cached", "params": {"batch": 1, "max_len": 1, "heads": 8,
                                              "kv_heads": 1, "head_dim": 32}, "cpu": True,
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 5, "max_len": 23, "heads": 6, "kv_heads": 3,
                                       "head_dim": 16}, "cpu": True, "visible": False},
        {"name": "decode_b1_s8192_8b", "params": {"batch": 1, "max_len": 8192, "heads": 32,
                                                  "kv_heads": 8, "head_dim": 128}},
        {"name": "decode_b64_s2048_8b", "params": {"batch": 64, "max_len": 2048, "heads": 32,
                                                   "kv_heads": 8, "head_dim": 128}},
        {"name": "decode_b8_s32768_8b", "params": {"batch": 8, "max_len": 32768,
                                                    "heads": 32, "kv_heads": 8,
                                                    "head_dim": 128}, "visible": False},
        {"name": "decode_b32_s4096_70b_tp8", "params": {"batch": 32, "max_len": 4096,
                                                        "heads": 8, "kv_heads": 1,
                                                        "head_dim": 128}, "visible": False},
    ],
    # QK^T and PV over the valid cache slots only
    "flops": lambda p: 4 * p["heads"] * p["head_dim"] * _cached_tokens(p),
    # q and o, the valid part of the k and v caches (bf16), int32 lengths
    "bytes": lambda p: 2 * (2 * p["batch"] * p["heads"] * p["head_dim"]
                            + 2 * p["kv_heads"] * p["head_dim"] * _cached_tokens(p))
    + 4 * p["batch"],
}


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class Model(nn.Module):
    def __init__(self, heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
        super().__init__()
        self.n_rep = heads // kv_heads
        self.scaling = head_dim ** -0.5

    def forward(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                seq_lens: torch.Tensor) -> torch.Tensor:
        max_len = key_cache.shape[2]
        slots = torch.arange(max_len, device=query.device)
        attn_mask = (slots[None, :] < seq_lens[:, None])[:, None, None, :]  # (b, 1, 1, max_len)
        key = repeat_kv(key_cache, self.n_rep)
        value = repeat_kv(value_cache, self.n_rep)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                             dropout_p=0.0, scale=self.scaling)
        return out.transpose(1, 2).contiguous()  # (b, 1, heads, d)


def get_inputs(batch: int = 64, max_len: int = 2048, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, 1, head_dim, dtype=dtype, scale=1.5)
    k_cache = gen.randn(batch, kv_heads, max_len, head_dim, dtype=dtype, scale=1.5)
    v_cache = gen.randn(batch, kv_heads, max_len, head_dim, dtype=dtype)
    seq_lens = gen.lengths(batch, max_len)
    return [q, k_cache, v_cache, seq_lens]


def get_init_inputs(heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
    return [heads, kv_heads, head_dim]
