"""Whisper's encoder MLP backward (fc1 1280 -> 5120, exact GELU, fc2 back, both with biases;
30-second clips of 1500 frames): dx and the weight and bias gradients; bf16 GEMMs."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "mlp_bwd_whisper",
    "category": "L2",
    "direction": "backward",
    "family": "Whisper",
    "models": ["Whisper large-v3", "Whisper small"],
    "shapes_from": "openai/whisper-large-v3 config.json: d_model 1280, encoder_ffn_dim 5120, "
                   "activation_function gelu, max_source_positions 1500; whisper-small: 768, "
                   "3072; tokens = clips x 1500",
    "precision": "bf16_grad",
    "description": "Backward of y = fc2(gelu(fc1(x))) with biases. Inputs: grad_y (T, H), x "
                   "(T, H), W1 (F, H), W2 (H, F), and the saved pre-activation a = x W1^T + b1 "
                   "(T, F). Returns dx = da W1, dW1 = da^T x, db1 = sum of da, dW2 = grad_y^T "
                   "gelu(a), db2 = sum of grad_y, with da = (grad_y W2) * gelu'(a) (fp32, "
                   "rounded to bf16 before the GEMMs).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 10, "hidden": 48, "ffn": 192}, "cpu": True},
        {"name": "train_b4_large_v3", "params": {"tokens": 4 * 1500, "hidden": 1280,
                                                 "ffn": 5120}},
        {"name": "train_b16_small", "params": {"tokens": 16 * 1500, "hidden": 768,
                                               "ffn": 3072}},
        {"name": "train_b8_large_v3", "params": {"tokens": 8 * 1500, "hidden": 1280,
                                                 "ffn": 5120}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 15, "hidden": 40, "ffn": 160}, "cpu": True,
         "visible": False},
    ],
    # four T x H x F GEMMs (dact, dWd, dx, dW1) and the elementwise part
    "flops": lambda p: 8 * p["tokens"] * p["hidden"] * p["ffn"] + 12 * p["tokens"] * p["ffn"],
    "bytes": lambda p: 8 * p["hidden"] * p["ffn"] + 6 * p["tokens"] * p["hidden"]
    + 2 * p["tokens"] * p["ffn"] + 4 * (p["hidden"] + p["ffn"]),
}


class Model(nn.Module):
    def forward(self, grad_y, x, w1, w2, a):
        dt = x.dtype
        z = a.float()
        cdf = 0.5 * (1.0 + torch.erf(z / math.sqrt(2.0)))
        pdf = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
        h = (z * cdf).to(dt)
        da = ((grad_y @ w2).float() * (cdf + z * pdf))
        da_b = da.to(dt)
        return (da_b @ w1, da_b.t() @ x, da.sum(0).to(dt), grad_y.t() @ h,
                grad_y.float().sum(0).to(dt))


def autograd_forward(model, grad_y, x, w1, w2, a):
    """The forward this problem differentiates (tests/problems/test_backward.py). The biases
    enter the gradients only through a: b1 is recovered from it (the mean over tokens of
    a - x W1^T), and b2, which enters none, is zeros."""
    b1 = (a.double() - x.double() @ w1.double().t()).mean(0).to(w1.dtype)
    b2 = torch.zeros(w2.shape[0], dtype=w2.dtype)

    def fn(x, w1, b1, w2, b2):
        return nn.functional.gelu(x @ w1.t() + b1) @ w2.t() + b2
    return fn, [x, w1, b1, w2, b2], [grad_y]


def get_inputs(tokens: int = 6000, hidden: int = 1280, ffn: int = 5120, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    w1 = gen.randn(ffn, hidden, dtype=dtype, scale=2.0 * hidden ** -0.5)
    b1 = gen.randn(ffn, scale=0.1)
    w2 = gen.randn(hidden, ffn, dtype=dtype, scale=ffn ** -0.5)
    a = (x @ w1.t()).float() + b1  # saved by the forward (bf16 GEMM, fp32 bias add)
    return [gen.randn(tokens, hidden, dtype=dtype), x, w1, w2, a.to(dtype)]


def get_init_inputs():
    return []
