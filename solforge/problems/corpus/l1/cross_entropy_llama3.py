"""Causal-LM cross-entropy loss over Llama 3's 128k vocabulary (HF ForCausalLMLoss), bf16 logits."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "cross_entropy_llama3",
    "category": "L1",
    "models": ["Llama 3 8B", "Qwen 2.5 7B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "fp32",
    "description": "loss = mean over non-ignored tokens of -log_softmax(logits.float())[t, "
                   "label[t]], labels int64 with -100 on the masked prompt (HF ForCausalLMLoss, "
                   "reduction mean).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "vocab": 509}, "cpu": True},
        {"name": "rl_512_llama3", "params": {"tokens": 512, "vocab": 128256}},
        {"name": "sft_2k_llama3", "params": {"tokens": 2048, "vocab": 128256}},
        {"name": "pretrain_4k_llama3", "params": {"tokens": 4096, "vocab": 128256},
         "visible": False},
        {"name": "sft_2k_qwen2_5", "params": {"tokens": 2048, "vocab": 151936},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 37, "vocab": 1031}, "cpu": True,
         "visible": False},
    ],
    # max, subtract, exp, sum per logit (the log and the pick are per token)
    "flops": lambda p: 4 * p["tokens"] * p["vocab"],
    # logits read once (bf16), labels read (int64), the scalar loss written
    "bytes": lambda p: 2 * p["tokens"] * p["vocab"] + 8 * p["tokens"] + 4,
}


class Model(nn.Module):
    def __init__(self, ignore_index: int = -100):
        super().__init__()
        self.ignore_index = ignore_index

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        return nn.functional.cross_entropy(logits, labels, ignore_index=self.ignore_index,
                                           reduction="mean")


def get_inputs(tokens: int = 2048, vocab: int = 128256, dtype=torch.bfloat16):
    logits = gen.randn(tokens, vocab, dtype=dtype, scale=3.0)
    labels = gen.indices(vocab, tokens)
    labels[: tokens // 4] = -100  # the prompt part of an SFT sample carries no loss
    return [logits, labels]


def get_init_inputs():
    return [-100]
