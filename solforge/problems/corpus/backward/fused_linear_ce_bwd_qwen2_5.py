"""Fused LM head + cross-entropy backward as Qwen2.5 7B trains it (hidden 3584, vocab 152064):
dhidden and dW of the LM head from the loss gradient, the logits recomputed, never stored
(Liger's fused linear cross-entropy); bf16 GEMMs, fp32 softmax."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "fused_linear_ce_bwd_qwen2_5",
    "category": "L2",
    "direction": "backward",
    "family": "Qwen2.5",
    "models": ["Qwen2.5 7B", "Qwen2.5 0.5B"],
    "shapes_from": "Qwen/Qwen2.5-7B config.json: hidden_size 3584, vocab_size 152064; "
                   "Qwen2.5-0.5B: 896, 151936; tokens = micro-batch x sequence",
    "precision": "bf16_grad",
    "description": "Backward of loss = mean CE(hidden W^T, labels) (ignore_index -100). Inputs: "
                   "grad_loss (0-d fp32), hidden (T, H) bf16, the LM head W (V, H) bf16, labels, "
                   "the saved fp32 lse (T,). Returns dhidden = dlogits W and dW = dlogits^T "
                   "hidden with dlogits = grad_loss / n * (exp(hidden W^T - lse) - onehot) (0 "
                   "on ignored rows), rounded to bf16 before the two GEMMs.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "hidden": 32, "vocab": 300}, "cpu": True},
        {"name": "train_4k_7b", "params": {"tokens": 4096, "hidden": 3584, "vocab": 152064}},
        {"name": "train_8k_0_5b", "params": {"tokens": 8192, "hidden": 896, "vocab": 151936}},
        {"name": "train_8k_7b", "params": {"tokens": 8192, "hidden": 3584, "vocab": 152064},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 21, "hidden": 48, "vocab": 517}, "cpu": True,
         "visible": False},
    ],
    # three T x H x V GEMMs (logits again, dhidden, dW) and the softmax
    "flops": lambda p: 6 * p["tokens"] * p["hidden"] * p["vocab"] + 3 * p["tokens"] * p["vocab"],
    # hidden and W read, dhidden and dW written (bf16); labels and lse
    "bytes": lambda p: 4 * (p["tokens"] + p["vocab"]) * p["hidden"] + 12 * p["tokens"],
}

IGNORE = -100


class Model(nn.Module):
    def forward(self, grad_loss, hidden, weight, labels, lse):
        keep = labels != IGNORE
        n = keep.sum().clamp_min(1)
        p = torch.exp((hidden @ weight.t()).float() - lse[:, None])
        rows = keep.nonzero().squeeze(1)
        p[rows, labels[rows]] -= 1.0
        p.mul_(grad_loss / n)
        p[~keep] = 0.0
        d = p.to(hidden.dtype)
        return d @ weight, d.t() @ hidden


def autograd_forward(model, grad_loss, hidden, weight, labels, lse):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(h, w):
        return nn.functional.cross_entropy(h @ w.t(), labels, ignore_index=IGNORE)
    return fn, [hidden, weight], [grad_loss]


def get_inputs(tokens: int = 4096, hidden: int = 3584, vocab: int = 152064,
               dtype=torch.bfloat16):
    h = gen.randn(tokens, hidden, dtype=dtype)
    # an LM head whose logits have a trained model's spread (std gen.LOGIT_STD)
    w = gen.randn(vocab, hidden, dtype=dtype, scale=gen.LOGIT_STD * hidden ** -0.5)
    labels = gen.indices(vocab, tokens)
    labels[: tokens // 4] = IGNORE
    lse = torch.logsumexp((h @ w.t()).float(), dim=-1)  # saved by the forward
    return [gen.randn((), scale=1.0).abs() + 0.5, h, w, labels, lse]


def get_init_inputs():
    return []
