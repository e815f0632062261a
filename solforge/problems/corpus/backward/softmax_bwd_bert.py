"""Attention-probability softmax backward as BERT's eager attention trains it (12 or 16 heads,
512 x 512 scores per head): dx = y * (dy - rowsum(dy * y)) from the saved probabilities; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "softmax_bwd_bert",
    "category": "L1",
    "direction": "backward",
    "family": "BERT",
    "models": ["BERT base", "BERT large"],
    "shapes_from": "google-bert/bert-base-uncased and bert-large-uncased config.json: "
                   "num_attention_heads 12 / 16, max_position_embeddings 512 (BertSelfAttention, "
                   "eager: softmax over the key dim)",
    "precision": "bf16_grad",
    "description": "Backward of y = softmax(x, dim=-1): inputs grad_out and the saved y (B, H, "
                   "S, S), rows of y summing to one (gen.probs: a softmax of scores with a "
                   "trained model's spread); returns dx = y * (grad_out - rowsum(grad_out * "
                   "y)), fp32 math, bf16 result.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "heads": 2, "seq": 12}, "cpu": True},
        {"name": "train_b32_base", "params": {"batch": 32, "heads": 12, "seq": 512}},
        {"name": "train_b16_large", "params": {"batch": 16, "heads": 16, "seq": 512}},
        {"name": "train_b64_s128_base", "params": {"batch": 64, "heads": 12, "seq": 128},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 1, "heads": 3, "seq": 33}, "cpu": True,
         "visible": False},
    ],
    # per element: the product, the row sum, the subtract and the product
    "flops": lambda p: 4 * p["batch"] * p["heads"] * p["seq"] ** 2,
    "bytes": lambda p: 6 * p["batch"] * p["heads"] * p["seq"] ** 2,
}


class Model(nn.Module):
    def forward(self, grad_out, y):
        g, yf = grad_out.float(), y.float()
        return (yf * (g - (g * yf).sum(-1, keepdim=True))).to(y.dtype)


def autograd_forward(model, grad_out, y):
    """The forward this problem differentiates (tests/problems/test_backward.py): softmax of
    log(y) is y again, where y's rows sum to one."""
    return (lambda x: torch.softmax(x, dim=-1)), [torch.log(y)], [grad_out]


def get_inputs(batch: int = 32, heads: int = 12, seq: int = 512, dtype=torch.bfloat16):
    return [gen.randn(batch, heads, seq, seq, dtype=dtype),
            gen.probs(batch, heads, seq, seq, dim=-1, dtype=dtype)]


def get_init_inputs():
    return []
