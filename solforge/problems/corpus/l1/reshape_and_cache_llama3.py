"""Writing new keys and values into a paged KV cache (vLLM's reshape_and_cache, the
slot_mapping form): token t's k and v go to block slot_mapping[t] // block_size, offset
slot_mapping[t] % block_size; slots of -1 (padding tokens) are skipped; the rest of the cache
is unchanged; returns the updated key and value caches; bf16. vLLM writes in place; this
functional form returns new caches, so copying them is part of the necessary traffic."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "reshape_and_cache_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (8 kv heads, head_dim 128) with "
                   "vLLM's block_size 16; Llama 3 70B at TP 8 (1 kv head per GPU)",
    "precision": "bf16",
    "description": "k, v (tokens, kv_heads, d), caches (blocks, block_size, kv_heads, d), "
                   "slot_mapping (tokens,) int64 -> caches with k[t], v[t] written at slot[t].",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "kv_heads": 2, "head_dim": 8, "blocks": 5,
                                         "block_size": 4}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "kv_heads": 1, "head_dim": 16, "blocks": 3,
                                       "block_size": 2}, "cpu": True, "visible": False},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "kv_heads": 8, "head_dim": 128,
                                             "blocks": 1024, "block_size": 16}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "kv_heads": 8, "head_dim": 128,
                                             "blocks": 1024, "block_size": 16}},
        {"name": "prefill_4k_70b_tp8", "params": {"tokens": 4096, "kv_heads": 1,
                                                  "head_dim": 128, "blocks": 2048,
                                                  "block_size": 16}, "visible": False},
    ],
    "flops": lambda p: 0,
    # the new k, v read; both caches read and written whole (the outputs are new tensors)
    "bytes": lambda p: 2 * 2 * p["tokens"] * p["kv_heads"] * p["head_dim"] + 8 * p["tokens"]
    + 2 * 2 * 2 * p["blocks"] * p["block_size"] * p["kv_heads"] * p["head_dim"],
}


class Model(nn.Module):
    def forward(self, k, v, key_cache, value_cache, slot_mapping):
        kc = key_cache.flatten(0, 1)
        vc = value_cache.flatten(0, 1)
        n = kc.shape[0]
        # padding tokens write to one extra row that is dropped afterwards
        slots = torch.where(slot_mapping >= 0, slot_mapping, torch.full_like(slot_mapping, n))
        kc = torch.cat([kc, kc[:1]]).index_put((slots,), k)[:n]
        vc = torch.cat([vc, vc[:1]]).index_put((slots,), v)[:n]
        return kc.view_as(key_cache), vc.view_as(value_cache)


def get_inputs(tokens: int = 64, kv_heads: int = 8, head_dim: int = 128, blocks: int = 4096,
               block_size: int = 16, dtype=torch.bfloat16):
    k = gen.randn(tokens, kv_heads, head_dim, dtype=dtype)
    v = gen.randn(tokens, kv_heads, head_dim, dtype=dtype)
    kc = gen.randn(blocks, block_size, kv_heads, head_dim, dtype=dtype)
    vc = gen.randn(blocks, block_size, kv_heads, head_dim, dtype=dtype)
    slots = gen.permutation(blocks * block_size)[:tokens].clone()
    slots[gen.uniform(tokens) < 0.1] = -1  # padded tokens of a CUDA-graph batch
    return [k, v, kc, vc, slots]


def get_init_inputs():
    return []
