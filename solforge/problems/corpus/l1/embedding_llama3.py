"""Token embedding lookup of Llama 3 (embed_tokens, 128256 x 4096) and Qwen 2.5 7B, bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "embedding_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Qwen 2.5 7B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "h = embed_tokens(input_ids): gather one row of the [vocab, hidden] bf16 table "
                   "per int64 token id (nn.Embedding in LlamaModel).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "vocab": 509, "hidden": 257}, "cpu": True},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "vocab": 128256, "hidden": 4096}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "vocab": 128256, "hidden": 4096}},
        {"name": "prefill_4k_qwen2_5_7b", "params": {"tokens": 4096, "vocab": 152064,
                                                     "hidden": 3584}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 37, "vocab": 1031, "hidden": 131}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 0,
    # the looked-up rows read and written once (bf16), ids read (int64)
    "bytes": lambda p: 2 * 2 * p["tokens"] * p["hidden"] + 8 * p["tokens"],
}


class Model(nn.Module):
    def __init__(self, vocab: int = 128256, hidden: int = 4096, dtype=torch.bfloat16):
        super().__init__()
        weight = torch.empty(vocab, hidden, dtype=dtype).normal_(0.0, 0.02)  # initializer_range
        self.embed_tokens = nn.Embedding(vocab, hidden, _weight=weight)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)


def get_inputs(tokens: int = 8192, vocab: int = 128256):
    return [gen.indices(vocab, tokens)]


def get_init_inputs(vocab: int = 128256, hidden: int = 4096, dtype=torch.bfloat16):
    return [vocab, hidden, dtype]
