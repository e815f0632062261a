"""Decode-time logits of Llama 3 (HF LlamaForCausalLM + generate's sampling warpers): final
RMSNorm, LM head over the 128k vocabulary, temperature, top-k filter, softmax."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "lm_head_topk_sampling_llama3",
    "category": "L2",
    "models": ["Llama 3 8B", "Llama 3.2 3B", "Llama 3.2 1B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672); "
                   "Llama 3.2 1B/3B (hidden 2048/3072, tied vocab 128256)",
    "precision": "bf16",
    "description": "For one new token per sequence: RMSNorm, logits = lm_head(h) in bf16, then "
                   "in fp32 logits / 0.6, every logit below the 50th largest set to -inf, "
                   "softmax; returns the bf16 logits and the fp32 sampling probabilities, "
                   "both (batch, vocab).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 3, "hidden": 64, "vocab": 1009}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "hidden": 48, "vocab": 517}, "cpu": True,
         "visible": False},
        {"name": "decode_b1_8b", "params": {"batch": 1, "hidden": 4096, "vocab": 128256}},
        {"name": "decode_b64_8b", "params": {"batch": 64, "hidden": 4096, "vocab": 128256}},
        {"name": "decode_b16_3b", "params": {"batch": 16, "hidden": 3072, "vocab": 128256},
         "visible": False},
        {"name": "decode_b128_1b", "params": {"batch": 128, "hidden": 2048, "vocab": 128256},
         "visible": False},
    ],
    # norm, the LM-head GEMM, temperature + top-k threshold + softmax (about 6 per logit)
    "flops": lambda p: p["batch"] * (4 * p["hidden"] + 2 * p["hidden"] * p["vocab"]
                                     + 6 * p["vocab"]),
    # hidden states, norm weight and LM head (bf16), bf16 logits and fp32 probabilities out
    "bytes": lambda p: 2 * (p["batch"] * p["hidden"] + p["hidden"] + p["vocab"] * p["hidden"])
    + 6 * p["batch"] * p["vocab"],
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, vocab: int = 128256, temperature: float = 0.6,
                 top_k: int = 50, eps: float = 1e-5, dtype=torch.bfloat16):
        super().__init__()
        self.eps, self.temperature, self.top_k = eps, temperature, top_k
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden).to(dtype))
        self.lm_head = nn.Linear(hidden, vocab, bias=False, dtype=dtype)
        # logits of std ~1.5 at every size (Llama 3 8B's 0.02 is 1.3 / sqrt(4096))
        nn.init.normal_(self.lm_head.weight, std=1.5 * hidden ** -0.5)

    def forward(self, hidden_states: torch.Tensor):
        # LlamaRMSNorm
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        h = self.norm_weight * h.to(dtype)
        logits = self.lm_head(h)
        # generate(): fp32 scores, TemperatureLogitsWarper, TopKLogitsWarper, softmax
        scores = logits.to(torch.float32) / self.temperature
        top_k = min(self.top_k, scores.size(-1))
        indices_to_remove = scores < torch.topk(scores, top_k)[0][..., -1, None]
        scores = scores.masked_fill(indices_to_remove, -float("inf"))
        return logits, torch.softmax(scores, dim=-1)


def get_inputs(batch: int = 1, hidden: int = 4096, dtype=torch.bfloat16):
    # last layer's residual stream: large and not normalized
    return [gen.randn(batch, hidden, dtype=dtype, scale=3.0)]


def get_init_inputs(hidden: int = 4096, vocab: int = 128256, dtype=torch.bfloat16):
    return [hidden, vocab, 0.6, 50, 1e-5, dtype]
