"""Token-embedding backward over Llama 3's 128k x 4096 table: the gradient rows scattered-added
into a zero table at their token ids, ids repeating (frequent tokens); bf16 table, fp32 sums."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "embedding_bwd_llama3",
    "category": "L1",
    "direction": "backward",
    "family": "Llama 3",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "shapes_from": "meta-llama/Meta-Llama-3-8B and -70B config.json: vocab_size 128256, "
                   "hidden_size 4096 / 8192; tokens = micro-batch x sequence",
    "precision": "bf16_grad",
    "description": "Backward of y = W[ids] (nn.Embedding, no padding index): inputs grad_out "
                   "(T, H) bf16 and ids (T,) int64, half of them from 64 frequent tokens (so "
                   "rows repeat hundreds of times); returns dW (V, H): zeros except dW[v] = the "
                   "fp32 sum of grad_out over the tokens with id v, rounded to bf16.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 40, "vocab": 300, "hidden": 32}, "cpu": True},
        {"name": "train_4k_8b", "params": {"tokens": 4096, "vocab": 128256, "hidden": 4096}},
        {"name": "train_16k_8b", "params": {"tokens": 16384, "vocab": 128256, "hidden": 4096}},
        {"name": "train_8k_70b", "params": {"tokens": 8192, "vocab": 128256, "hidden": 8192},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 77, "vocab": 513, "hidden": 24}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: p["tokens"] * p["hidden"],
    # grad_out and ids read; the whole table written (its zeros are part of the result)
    "bytes": lambda p: 2 * p["tokens"] * p["hidden"] + 8 * p["tokens"]
    + 2 * p["vocab"] * p["hidden"],
}


class Model(nn.Module):
    def __init__(self, vocab: int = 128256):
        super().__init__()
        self.vocab = vocab

    def forward(self, grad_out, ids):
        table = torch.zeros(self.vocab, grad_out.shape[1], dtype=torch.float32,
                            device=grad_out.device)
        table.index_add_(0, ids, grad_out.float())
        return table.to(grad_out.dtype)


def autograd_forward(model, grad_out, ids):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    table = torch.zeros(model.vocab, grad_out.shape[1], dtype=grad_out.dtype)
    return (lambda w: w[ids]), [table], [grad_out]


def get_inputs(tokens: int = 4096, vocab: int = 128256, hidden: int = 4096,
               dtype=torch.bfloat16):
    ids = gen.indices(vocab, tokens)
    hot = gen.indices(vocab, 64)  # frequent tokens (punctuation, "the", ...)
    ids[::2] = hot[gen.indices(64, (tokens + 1) // 2)]
    return [gen.randn(tokens, hidden, dtype=dtype), ids]


def get_init_inputs(vocab: int = 128256):
    return [vocab]
