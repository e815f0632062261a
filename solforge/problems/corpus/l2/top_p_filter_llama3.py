"""Nucleus (top-p) filtering of next-token logits as HF's TemperatureLogitsWarper +
TopPLogitsWarper apply it for Llama 3 sampling: logits / temperature, sorted ascending, the
smallest-probability tokens whose cumulative mass stays within 1 - top_p removed (the last
token always kept), and the kept ones renormalized; returns the sampling distribution, fp32
data. Judged at the bf16 class's tolerance: a token whose cumulative mass sits within
rounding of the threshold may be kept by one correct kernel and dropped by another, which
moves every probability by about that token's (tiny) mass."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "top_p_filter_llama3",
    "category": "L2",
    "models": ["Llama 3 8B Instruct", "Qwen2.5 7B Instruct"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B-Instruct (vocab_size 128256) and "
                   "its generation_config.json (temperature 0.6, top_p 0.9); "
                   "Qwen/Qwen2.5-7B-Instruct "
                   "(vocab 152064, temperature 0.7, top_p 0.8)",
    "precision": "bf16",
    "description": "logits (batch, vocab) fp32 -> probs (batch, vocab): softmax over the top-p "
                   "nucleus of logits / temperature, zero elsewhere.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 3, "vocab": 300, "temperature": 0.6,
                                         "top_p": 0.9}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "vocab": 97, "temperature": 1.0,
                                       "top_p": 0.5}, "cpu": True, "visible": False},
        {"name": "decode_b1_llama3", "params": {"batch": 1, "vocab": 128256,
                                                "temperature": 0.6, "top_p": 0.9}},
        {"name": "decode_b64_llama3", "params": {"batch": 64, "vocab": 128256,
                                                 "temperature": 0.6, "top_p": 0.9}},
        {"name": "decode_b32_qwen", "params": {"batch": 32, "vocab": 152064,
                                               "temperature": 0.7, "top_p": 0.8},
         "visible": False},
    ],
    # a sort (~log2 V compare-swaps per element) is not necessary; softmax and a threshold are
    "flops": lambda p: 8 * p["batch"] * p["vocab"],
    "bytes": lambda p: 4 * 2 * p["batch"] * p["vocab"],
}


class Model(nn.Module):
    def __init__(self, temperature: float = 0.6, top_p: float = 0.9):
        super().__init__()
        self.temperature, self.top_p = temperature, top_p

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        scores = logits / self.temperature
        sorted_logits, sorted_idx = torch.sort(scores, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cum <= (1 - self.top_p)
        # the most likely token is always kept
        remove_sorted = torch.cat([remove_sorted[..., :-1],
                                   torch.zeros_like(remove_sorted[..., -1:])], dim=-1)
        remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
        return torch.softmax(scores.masked_fill(remove, float("-inf")), dim=-1)


def get_inputs(batch: int = 64, vocab: int = 128256):
    # LM logits: std ~3 with a few confident tokens, so the nucleus holds tens to thousands
    return [gen.randn(batch, vocab, scale=3.0)]


def get_init_inputs(temperature: float = 0.6, top_p: float = 0.9):
    return [temperature, top_p]
