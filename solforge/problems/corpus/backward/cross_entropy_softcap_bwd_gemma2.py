"""Gemma 2's LM-head loss backward: cross-entropy over 256k logits soft-capped at 30 (logits =
30 tanh(raw / 30)), the gradient taken back through the cap to the raw logits; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "cross_entropy_softcap_bwd_gemma2",
    "category": "L2",
    "direction": "backward",
    "family": "Gemma 2",
    "models": ["Gemma 2 9B", "Gemma 2 2B"],
    "shapes_from": "google/gemma-2-9b config.json: vocab_size 256000, final_logit_softcapping "
                   "30.0; tokens = micro-batch x sequence",
    "precision": "bf16_grad",
    "description": "Backward of loss = mean over labelled tokens of cross-entropy of c = 30 "
                   "tanh(raw / 30). Inputs: grad_loss (0-d fp32), raw logits (T, V) bf16, labels "
                   "(-100 ignored), the saved fp32 lse of the capped logits. Returns draw = "
                   "grad_loss / n * (softmax(c) - onehot) * (1 - tanh^2(raw / 30)), 0 on "
                   "ignored rows.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "vocab": 640}, "cpu": True},
        {"name": "train_2k", "params": {"tokens": 2048, "vocab": 256000}},
        {"name": "train_4k", "params": {"tokens": 4096, "vocab": 256000}},
        {"name": "train_8k", "params": {"tokens": 8192, "vocab": 256000}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 23, "vocab": 1001}, "cpu": True,
         "visible": False},
    ],
    # per logit: tanh, the cap, subtract, exp, scale, the cap's derivative
    "flops": lambda p: 8 * p["tokens"] * p["vocab"],
    "bytes": lambda p: 4 * p["tokens"] * p["vocab"] + 12 * p["tokens"],
}

IGNORE, CAP = -100, 30.0


class Model(nn.Module):
    def forward(self, grad_loss, raw, labels, lse):
        keep = labels != IGNORE
        n = keep.sum().clamp_min(1)
        t = torch.tanh(raw.float() / CAP)
        p = torch.exp(CAP * t - lse[:, None])
        rows = keep.nonzero().squeeze(1)
        p[rows, labels[rows]] -= 1.0
        p.mul_(1.0 - t * t).mul_(grad_loss / n)  # in place: each fp32 copy is 8 GB at 8k
        p[~keep] = 0.0
        return p.to(raw.dtype)


def autograd_forward(model, grad_loss, raw, labels, lse):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(raw):
        return nn.functional.cross_entropy(CAP * torch.tanh(raw / CAP), labels,
                                           ignore_index=IGNORE)
    return fn, [raw], [grad_loss]


def get_inputs(tokens: int = 4096, vocab: int = 256000, dtype=torch.bfloat16):
    # raw logits spread wide enough that the cap bends the largest (tanh(1) = 0.76)
    raw = gen.logits(tokens, vocab, dtype=dtype, scale=10.0)
    labels = gen.indices(vocab, tokens)
    labels[: tokens // 4] = IGNORE
    lse = torch.logsumexp(CAP * torch.tanh(raw.float() / CAP), dim=-1)  # saved by the forward
    return [gen.randn((), scale=1.0).abs() + 0.5, raw, labels, lse]


def get_init_inputs():
    return []
