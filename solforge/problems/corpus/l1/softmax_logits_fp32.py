"""Sampling softmax over the vocabulary (vLLM's sampler, fp32 logits), Llama 3 and Qwen 2.5."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "softmax_logits_fp32",
    "category": "L1",
    "models": ["Llama 3 8B", "Qwen 2.5 7B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "fp32",
    "description": "probs = logits.softmax(dim=-1, dtype=float32) over a 128k/152k vocabulary, one "
                   "row per sequence being sampled (vLLM Sampler, logits upcast to fp32).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "vocab": 509}, "cpu": True},
        {"name": "decode_b1_llama3", "params": {"batch": 1, "vocab": 128256}},
        {"name": "decode_b64_llama3", "params": {"batch": 64, "vocab": 128256}},
        {"name": "decode_b256_qwen2_5", "params": {"batch": 256, "vocab": 151936},
         "visible": False},
        {"name": "prompt_logprobs_1k_qwen2_5", "params": {"batch": 1024, "vocab": 151936},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 7, "vocab": 1031}, "cpu": True,
         "visible": False},
    ],
    # max, subtract, exp, sum, divide per element
    "flops": lambda p: 5 * p["batch"] * p["vocab"],
    # logits read and probabilities written, fp32
    "bytes": lambda p: 4 * 2 * p["batch"] * p["vocab"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(dim=-1, dtype=torch.float32)


def get_inputs(batch: int = 64, vocab: int = 128256):
    # LLM logits spread over a few units
    return [gen.randn(batch, vocab, dtype=torch.float32, scale=3.0)]


def get_init_inputs():
    return []
