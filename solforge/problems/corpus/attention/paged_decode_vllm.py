"""Paged-KV decode attention as vLLM serves Llama 3 (PagedAttention): each sequence's keys
and values live in fixed-size pages scattered over a shared pool, found via a block table.
The reference gathers each sequence's pages and attends in fp32 (vLLM's test reference)."""

import torch
import torch.nn as nn

from solforge.problems import gen


def _cached_tokens(p):
    """Expected total context length: gen.lengths draws U[1, max] with one sequence full."""
    return (p["batch"] - 1) * (1 + p["max_len"]) / 2 + p["max_len"]


SOLFORGE = {
    "name": "paged_decode_vllm",
    "category": "attention",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672); "
                   "vLLM's paged KV cache with block_size 16",
    "precision": "bf16",
    "description": "out[b] = softmax(q[b] K_b^T * d^-0.5) V_b for one query token per "
                   "sequence, K_b/V_b being the first seq_lens[b] tokens of the pages "
                   "block_table[b] of the pools k_cache/v_cache (num_pages, page_size, "
                   "kv_heads, d); GQA with 32 q / 8 kv heads (70B at TP 8: 8 / 1).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 3, "max_len": 37, "page_size": 4,
                                         "heads": 4, "kv_heads": 2, "head_dim": 16},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 5, "max_len": 29, "page_size": 8, "heads": 6,
                                       "kv_heads": 1, "head_dim": 32}, "cpu": True,
         "visible": False},
        {"name": "decode_b1_s8192_8b", "params": {"batch": 1, "max_len": 8192,
                                                  "page_size": 16, "heads": 32, "kv_heads": 8,
                                                  "head_dim": 128}},
        {"name": "decode_b32_s4096_8b", "params": {"batch": 32, "max_len": 4096,
                                                   "page_size": 16, "heads": 32, "kv_heads": 8,
                                                   "head_dim": 128}},
        {"name": "decode_b128_s1024_8b", "params": {"batch": 128, "max_len": 1024,
                                                    "page_size": 16, "heads": 32,
                                                    "kv_heads": 8, "head_dim": 128},
         "visible": False},
        {"name": "decode_b64_s8192_70b_tp8", "params": {"batch": 64, "max_len": 8192,
                                                        "page_size": 16, "heads": 8,
                                                        "kv_heads": 1, "head_dim": 128},
         "visible": False},
    ],
    # QK^T and PV over each sequence's own tokens
    "flops": lambda p: 4 * p["heads"] * p["head_dim"] * _cached_tokens(p),
    # q and o, each sequence's k and v once (bf16), the block table and lengths (int32)
    "bytes": lambda p: 2 * (2 * p["batch"] * p["heads"] * p["head_dim"]
                            + 2 * p["kv_heads"] * p["head_dim"] * _cached_tokens(p))
    + 4 * (p["batch"] + _cached_tokens(p) / p["page_size"]),
}


class Model(nn.Module):
    def __init__(self, heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
        super().__init__()
        self.n_rep = heads // kv_heads
        self.scale = head_dim ** -0.5

    def forward(self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                block_table: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
        _, page_size, kv_heads, head_dim = key_cache.shape
        out = torch.empty_like(query)
        for b, seq_len in enumerate(seq_lens.tolist()):
            num_pages = (seq_len + page_size - 1) // page_size
            pages = block_table[b, :num_pages].long()
            k = key_cache[pages].reshape(-1, kv_heads, head_dim)[:seq_len]
            v = value_cache[pages].reshape(-1, kv_heads, head_dim)[:seq_len]
            k = k.repeat_interleave(self.n_rep, dim=1).float()  # (seq_len, heads, d)
            v = v.repeat_interleave(self.n_rep, dim=1).float()
            scores = torch.einsum("hd,khd->hk", query[b].float(), k) * self.scale
            probs = torch.softmax(scores, dim=-1)
            out[b] = torch.einsum("hk,khd->hd", probs, v).to(query.dtype)
        return out


def get_inputs(batch: int = 32, max_len: int = 4096, page_size: int = 16, heads: int = 32,
               kv_heads: int = 8, head_dim: int = 128, dtype=torch.bfloat16):
    seq_lens = gen.lengths(batch, max_len)
    block_table, num_pages = gen.page_table(seq_lens, page_size)
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, head_dim, dtype=dtype, scale=1.5)
    k_cache = gen.randn(num_pages, page_size, kv_heads, head_dim, dtype=dtype, scale=1.5)
    v_cache = gen.randn(num_pages, page_size, kv_heads, head_dim, dtype=dtype)
    return [q, k_cache, v_cache, block_table, seq_lens]


def get_init_inputs(heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
    return [heads, kv_heads, head_dim]
