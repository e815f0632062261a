"""Greedy sampling: argmax over the vocabulary of fp32 logits (vLLM Sampler.greedy_sample)."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "argmax_greedy_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Qwen 2.5 7B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "fp32",
    "description": "next_token = logits.argmax(dim=-1) over a 128k/152k vocabulary, one row per "
                   "sequence (int64 ids; torch.argmax gives ties the lowest index, and any "
                   "id of a largest logit passes).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "vocab": 509}, "cpu": True},
        {"name": "decode_b1_llama3", "params": {"batch": 1, "vocab": 128256}},
        {"name": "decode_b64_llama3", "params": {"batch": 64, "vocab": 128256}},
        {"name": "decode_b256_qwen2_5", "params": {"batch": 256, "vocab": 151936},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 5, "vocab": 1031}, "cpu": True,
         "visible": False},
    ],
    # one comparison per logit
    "flops": lambda p: p["batch"] * p["vocab"],
    # logits read (fp32), ids written (int64)
    "bytes": lambda p: 4 * p["batch"] * p["vocab"] + 8 * p["batch"],
    # the ids are judged by the logit they select: a kernel whose reduction breaks a tie
    # the other way (a tree of warps, not a left-to-right scan) is as greedy
    "index_outputs": {0: {"input": 0, "dim": -1}},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1).view(-1)


def get_inputs(batch: int = 64, vocab: int = 128256):
    return [gen.randn(batch, vocab, dtype=torch.float32, scale=3.0)]


def get_init_inputs():
    return []
