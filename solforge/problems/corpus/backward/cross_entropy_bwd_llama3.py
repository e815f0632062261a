"""Causal-LM cross-entropy backward over Llama 3's 128k vocabulary (mean over the tokens that
carry a label, -100 on the prompt): dlogits from the saved logsumexp; bf16 logits, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "cross_entropy_bwd_llama3",
    "category": "L1",
    "direction": "backward",
    "family": "Llama 3",
    "models": ["Llama 3 8B"],
    "shapes_from": "meta-llama/Meta-Llama-3-8B config.json: vocab_size 128256; tokens = "
                   "micro-batch x sequence (HF ForCausalLMLoss, ignore_index -100)",
    "precision": "bf16_grad",
    "description": "Backward of loss = mean over labelled tokens of -log_softmax(logits)[t, "
                   "label[t]]. Inputs: grad_loss (a 0-d fp32 tensor), logits (T, V) bf16, "
                   "labels (T,) int64 with -100 on a quarter of the tokens, and the saved fp32 "
                   "lse (T,). Returns dlogits = grad_loss / n * (exp(logits - lse) - "
                   "onehot(label)) on labelled rows and 0 on ignored ones, n the labelled count.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "vocab": 509}, "cpu": True},
        {"name": "train_4k", "params": {"tokens": 4096, "vocab": 128256}},
        {"name": "train_8k", "params": {"tokens": 8192, "vocab": 128256}},
        {"name": "train_16k", "params": {"tokens": 16384, "vocab": 128256}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 37, "vocab": 1031}, "cpu": True,
         "visible": False},
    ],
    # per logit: subtract, exp, scale (the one-hot and the count are per token)
    "flops": lambda p: 3 * p["tokens"] * p["vocab"],
    # logits read and dlogits written (bf16), labels and lse read
    "bytes": lambda p: 4 * p["tokens"] * p["vocab"] + 12 * p["tokens"],
}

IGNORE = -100


class Model(nn.Module):
    def forward(self, grad_loss, logits, labels, lse):
        keep = labels != IGNORE
        n = keep.sum().clamp_min(1)
        p = torch.exp(logits.float() - lse[:, None])
        rows = keep.nonzero().squeeze(1)
        p[rows, labels[rows]] -= 1.0
        p.mul_(grad_loss / n)  # in place: at 16k x 128k one fp32 copy is 8 GB
        p[~keep] = 0.0
        return p.to(logits.dtype)


def autograd_forward(model, grad_loss, logits, labels, lse):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(logits):
        return nn.functional.cross_entropy(logits, labels, ignore_index=IGNORE)
    return fn, [logits], [grad_loss]


def get_inputs(tokens: int = 8192, vocab: int = 128256, dtype=torch.bfloat16):
    logits = gen.logits(tokens, vocab, dtype=dtype)
    labels = gen.indices(vocab, tokens)
    labels[: tokens // 4] = IGNORE  # the prompt part of an SFT sample carries no loss
    lse = torch.logsumexp(logits.float(), dim=-1)  # saved by the forward
    return [gen.randn((), scale=1.0).abs() + 0.5, logits, labels, lse]


def get_init_inputs():
    return []
