"""GPT-2's gelu_new (the tanh approximation) backward over the MLP's 4 x n_embd activations
(3072 for small, 6400 for XL); bf16, fp32 math."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "gelu_tanh_bwd_gpt2",
    "category": "L1",
    "direction": "backward",
    "family": "GPT-2",
    "models": ["GPT-2 small", "GPT-2 XL"],
    "shapes_from": "openai-community/gpt2 and gpt2-xl config.json: activation_function "
                   "gelu_new, n_inner 4 x n_embd (3072 / 6400), n_ctx 1024; tokens = batch x "
                   "1024",
    "precision": "bf16_grad",
    "description": "Backward of y = 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2/pi): "
                   "inputs grad_out and the saved pre-activation x; returns dx = grad_out * "
                   "(0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "inter": 192}, "cpu": True},
        {"name": "train_b8_small", "params": {"tokens": 8 * 1024, "inter": 3072}},
        {"name": "train_b16_small", "params": {"tokens": 16 * 1024, "inter": 3072}},
        {"name": "train_b4_xl", "params": {"tokens": 4 * 1024, "inter": 6400},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 11, "inter": 400}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 14 * p["tokens"] * p["inter"],
    "bytes": lambda p: 6 * p["tokens"] * p["inter"],
}

C = math.sqrt(2.0 / math.pi)


class Model(nn.Module):
    def forward(self, grad_out, x):
        xf = x.float()
        t = torch.tanh(C * (xf + 0.044715 * xf ** 3))
        d = 0.5 * (1.0 + t) + 0.5 * xf * (1.0 - t * t) * C * (1.0 + 3 * 0.044715 * xf * xf)
        return (grad_out.float() * d).to(x.dtype)


def autograd_forward(model, grad_out, x):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return (lambda x: nn.functional.gelu(x, approximate="tanh")), [x], [grad_out]


def get_inputs(tokens: int = 8192, inter: int = 3072, dtype=torch.bfloat16):
    return [gen.randn(tokens, inter, dtype=dtype), gen.randn(tokens, inter, dtype=dtype,
                                                             scale=2.0)]


def get_init_inputs():
    return []
