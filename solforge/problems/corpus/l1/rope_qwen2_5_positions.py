"""Rotary embedding of Qwen 2.5 from position ids, as vLLM's RotaryEmbedding (neox style).

The cos/sin cache (rope_theta 1e6, 32768 positions) is built once in __init__; forward
gathers its rows by the flattened token positions of a batch of sequences.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rope_qwen2_5_positions",
    "category": "L1",
    "models": ["Qwen 2.5 7B", "Qwen 2.5 72B"],
    "family": "Qwen2.5",
    "shapes_from": "config.json of Qwen/Qwen2.5-7B (hidden_size 3584, intermediate_size 18944, 28 "
                   "heads, 4 kv heads, vocab 152064) and Qwen2.5-72B (hidden 8192), rope_theta "
                   "1000000",
    "precision": "bf16",
    "description": "Gather cos/sin rows by int64 positions, then rotate q [tokens, heads*128] and "
                   "k [tokens, kv_heads*128] neox-style (vLLM RotaryEmbedding.forward_native).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "seqs": 1, "heads": 4, "kv_heads": 2,
                                         "head_dim": 64, "max_pos": 4096}, "cpu": True},
        {"name": "decode_b128_7b", "params": {"tokens": 128, "seqs": 128, "heads": 28,
                                              "kv_heads": 4, "head_dim": 128,
                                              "max_pos": 32768}},
        {"name": "prefill_8k_7b", "params": {"tokens": 8192, "seqs": 1, "heads": 28,
                                             "kv_heads": 4, "head_dim": 128, "max_pos": 32768}},
        {"name": "chunked_prefill_72b", "params": {"tokens": 4096, "seqs": 5, "heads": 64,
                                                   "kv_heads": 8, "head_dim": 128,
                                                   "max_pos": 32768}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 37, "seqs": 3, "heads": 7, "kv_heads": 1,
                                       "head_dim": 128, "max_pos": 4096}, "cpu": True,
         "visible": False},
    ],
    # two products and one add per output element of q and k
    "flops": lambda p: 3 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"],
    # q, k read and written (bf16), positions read (int64), one cos/sin row per token (bf16)
    "bytes": lambda p: (2 * 2 * p["tokens"] * (p["heads"] + p["kv_heads"]) * p["head_dim"]
                        + 8 * p["tokens"] + 2 * p["tokens"] * p["head_dim"]),
}


def _apply_rotary_emb_torch(x, cos, sin):
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    x1, x2 = torch.chunk(x, 2, dim=-1)
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    return torch.cat((o1, o2), dim=-1)


class Model(nn.Module):
    def __init__(self, head_dim: int = 128, max_pos: int = 32768, base: float = 1e6,
                 dtype=torch.bfloat16):
        super().__init__()
        self.head_size = head_dim
        self.rotary_dim = head_dim
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
        t = torch.arange(max_pos, dtype=torch.float)
        freqs = torch.einsum("i,j -> ij", t, inv_freq)
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward(self, positions, query, key):
        positions = positions.flatten()
        num_tokens = positions.shape[0]
        cos_sin = self.cos_sin_cache.index_select(0, positions)
        cos, sin = cos_sin.chunk(2, dim=-1)

        query_shape = query.shape
        query = query.view(num_tokens, -1, self.head_size)
        query_rot = query[..., :self.rotary_dim]
        query_pass = query[..., self.rotary_dim:]
        query_rot = _apply_rotary_emb_torch(query_rot, cos, sin)
        query = torch.cat((query_rot, query_pass), dim=-1).reshape(query_shape)

        key_shape = key.shape
        key = key.view(num_tokens, -1, self.head_size)
        key_rot = key[..., :self.rotary_dim]
        key_pass = key[..., self.rotary_dim:]
        key_rot = _apply_rotary_emb_torch(key_rot, cos, sin)
        key = torch.cat((key_rot, key_pass), dim=-1).reshape(key_shape)
        return query, key


def _positions(tokens: int, seqs: int, max_pos: int) -> torch.Tensor:
    """Positions of ``seqs`` sequences packed into ``tokens`` (each a run of consecutive
    positions from a random start; one token per sequence at decode)."""
    lens = [tokens // seqs + (1 if i < tokens % seqs else 0) for i in range(seqs)]
    starts = gen.indices(max_pos - max(lens) + 1, seqs)
    return torch.cat([s + torch.arange(n) for s, n in zip(starts.tolist(), lens)])


def get_inputs(tokens: int = 8192, seqs: int = 1, heads: int = 28, kv_heads: int = 4,
               head_dim: int = 128, max_pos: int = 32768, dtype=torch.bfloat16):
    positions = _positions(tokens, seqs, max_pos)
    query = gen.randn(tokens, heads * head_dim, dtype=dtype)
    key = gen.randn(tokens, kv_heads * head_dim, dtype=dtype)
    return [positions, query, key]


def get_init_inputs(head_dim: int = 128, max_pos: int = 32768, dtype=torch.bfloat16):
    return [head_dim, max_pos, 1e6, dtype]
