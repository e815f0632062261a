"""Cross-entropy with the auxiliary z-loss as OLMo trains (olmo/train.py cross_entropy_loss
with z_loss_multiplier 1e-4, from PaLM): per token, CE = logsumexp(logits) - logits[label] and
z = 1e-4 * logsumexp(logits)^2, ignored labels (-100) excluded, both averaged over the counted
tokens; fp32 logits."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "cross_entropy_z_loss_olmo",
    "category": "L2",
    "models": ["OLMo 2 7B", "OLMo 7B"],
    "family": "OLMo",
    "shapes_from": "config.json of allenai/OLMo-2-1124-7B (vocab_size 100352) and OLMo-7B-0424 "
                   "(embedding_size 50304); OLMo's training config (z_loss_multiplier 1e-4, "
                   "4096-token sequences)",
    "precision": "fp32",
    "description": "logits (tokens, V) fp32, labels (tokens,) with -100 ignored -> (mean CE, mean "
                   "z) "
                   "as two scalars.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 9, "vocab": 64}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 5, "vocab": 33}, "cpu": True, "visible": False},
        {"name": "seq4k_olmo2", "params": {"tokens": 4096, "vocab": 100352}},
        {"name": "seq2k_olmo1", "params": {"tokens": 2048, "vocab": 50304}},
        {"name": "seq8k_olmo2", "params": {"tokens": 8192, "vocab": 100352}, "visible": False},
    ],
    "flops": lambda p: 4 * p["tokens"] * p["vocab"],
    "bytes": lambda p: 4 * p["tokens"] * p["vocab"] + 8 * p["tokens"],
}


class Model(nn.Module):
    def __init__(self, z_loss_multiplier: float = 1e-4):
        super().__init__()
        self.z = z_loss_multiplier

    def forward(self, logits: torch.Tensor, labels: torch.Tensor):
        keep = labels != -100
        lse = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(1, labels.clamp(min=0)[:, None])[:, 0]
        n = keep.sum().clamp(min=1)
        ce = ((lse - picked) * keep).sum() / n
        z = (self.z * lse.pow(2) * keep).sum() / n
        return ce, z


def get_inputs(tokens: int = 4096, vocab: int = 100352):
    labels = gen.indices(vocab, tokens)
    # about 10% padding / prompt tokens are ignored
    labels = torch.where(gen.uniform(tokens) < 0.1, torch.full_like(labels, -100), labels)
    return [gen.randn(tokens, vocab, scale=3.0), labels]


def get_init_inputs():
    return [1e-4]
