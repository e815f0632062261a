"""The repetition penalty logits processor (HF RepetitionPenaltyLogitsProcessor, CTRL's rule)
as Llama 3 chat serving applies it: for every token id already in the context, its logit is
divided by the penalty when positive and multiplied by it when negative; fp32."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "repetition_penalty_llama3",
    "category": "L1",
    "models": ["Llama 3 8B Instruct"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B-Instruct (vocab_size 128256); "
                   "contexts of 512 to 8192 tokens; penalty 1.1 (a common serving default)",
    "precision": "fp32",
    "description": "logits (b, V), context ids (b, n): s = logits.gather(ids); s = s < 0 ? s * p : "
                   "s / p; logits.scatter(ids, s) (repeated ids get the same value).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "vocab": 200, "context": 30}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "vocab": 51, "context": 70}, "cpu": True,
         "visible": False},
        {"name": "decode_b64_ctx2k", "params": {"batch": 64, "vocab": 128256, "context": 2048}},
        {"name": "decode_b8_ctx8k", "params": {"batch": 8, "vocab": 128256, "context": 8192}},
        {"name": "decode_b256_ctx512", "params": {"batch": 256, "vocab": 128256,
                                                  "context": 512}, "visible": False},
    ],
    "flops": lambda p: p["batch"] * p["context"],
    "bytes": lambda p: 4 * 2 * p["batch"] * p["vocab"] + 8 * p["batch"] * p["context"],
}


class Model(nn.Module):
    def __init__(self, penalty: float = 1.1):
        super().__init__()
        self.penalty = penalty

    def forward(self, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        s = torch.gather(logits, 1, ids)
        s = torch.where(s < 0, s * self.penalty, s / self.penalty)
        return logits.scatter(1, ids, s)


def get_inputs(batch: int = 64, vocab: int = 128256, context: int = 2048):
    return [gen.randn(batch, vocab, scale=3.0), gen.indices(vocab, batch, context)]


def get_init_inputs():
    return [1.1]
