"""BERT's intermediate bias + exact (erf) GELU backward (y = gelu(x + b), intermediate 3072 for
base, 4096 for large, sequences of 512): dx and dbias (summed over tokens); bf16, fp32 math."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "bias_gelu_bwd_bert",
    "category": "L1",
    "direction": "backward",
    "family": "BERT",
    "models": ["BERT base", "BERT large"],
    "shapes_from": "google-bert/bert-base-uncased and bert-large-uncased config.json: "
                   "intermediate_size 3072 / 4096, hidden_act gelu (erf); tokens = batch x 512",
    "precision": "bf16_grad",
    "description": "Backward of y = gelu(x + b) with the exact GELU: inputs grad_out and the "
                   "saved x (the dense layer's output before its bias); returns dx = grad_out "
                   "* (Phi(z) + z phi(z)) at z = x + b, and dbias = the sum of dx over tokens.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "inter": 128}, "cpu": True},
        {"name": "train_b16_base", "params": {"tokens": 16 * 512, "inter": 3072}},
        {"name": "train_b32_large", "params": {"tokens": 32 * 512, "inter": 4096}},
        {"name": "train_b8_large", "params": {"tokens": 8 * 512, "inter": 4096},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 15, "inter": 272}, "cpu": True,
         "visible": False},
    ],
    # per element: the add, erf, exp and the products; the bias sum
    "flops": lambda p: 12 * p["tokens"] * p["inter"],
    "bytes": lambda p: 6 * p["tokens"] * p["inter"] + 4 * p["inter"],
}


class Model(nn.Module):
    def __init__(self, inter: int = 3072, dtype=torch.bfloat16):
        super().__init__()
        self.bias = nn.Parameter((0.1 * torch.randn(inter, dtype=torch.float32)).to(dtype))

    def forward(self, grad_out, x):
        z = x.float() + self.bias.float()
        cdf = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
        pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
        dx = grad_out.float() * (cdf + z * pdf)
        return dx.to(x.dtype), dx.sum(0).to(self.bias.dtype)


def autograd_forward(model, grad_out, x):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return (lambda x, b: nn.functional.gelu(x + b)), [x, model.bias], [grad_out]


def get_inputs(tokens: int = 8192, inter: int = 3072, dtype=torch.bfloat16):
    return [gen.randn(tokens, inter, dtype=dtype), gen.randn(tokens, inter, dtype=dtype,
                                                             scale=2.0)]


def get_init_inputs(inter: int = 3072, dtype=torch.bfloat16):
    return [inter, dtype]
