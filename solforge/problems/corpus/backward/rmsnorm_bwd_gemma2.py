"""Gemma 2's RMSNorm backward: the weight is stored as an offset and applied as (1 + w), the
whole product in fp32 (HF Gemma2RMSNorm), hidden 2304 (2B) and 3584 (9B), bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rmsnorm_bwd_gemma2",
    "category": "L1",
    "direction": "backward",
    "family": "Gemma 2",
    "models": ["Gemma 2 2B", "Gemma 2 9B"],
    "shapes_from": "google/gemma-2-2b and -9b config.json: hidden_size 2304 / 3584, "
                   "rms_norm_eps 1e-6; tokens = micro-batch x sequence (context 8192)",
    "precision": "bf16_grad",
    "description": "Backward of y = (x * rstd) * (1 + w) computed in fp32, cast to bf16 at the "
                   "end: inputs grad_out, x and the saved fp32 rstd; returns dx = rstd * (d - "
                   "xhat * mean(d * xhat)) with d = g * (1 + w), and dweight = sum of g * xhat.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "hidden": 192}, "cpu": True},
        {"name": "train_4k_2b", "params": {"tokens": 4096, "hidden": 2304}},
        {"name": "train_8k_9b", "params": {"tokens": 8192, "hidden": 3584}},
        {"name": "train_16k_9b", "params": {"tokens": 16384, "hidden": 3584}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 27, "hidden": 320}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 10 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 4 * p["tokens"] + 4 * p["hidden"],
}

EPS = 1e-6


class Model(nn.Module):
    def __init__(self, hidden: int = 3584, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter((0.1 * torch.randn(hidden, dtype=torch.float32)).to(dtype))

    def forward(self, grad_out: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor):
        g = grad_out.float()
        xhat = x.float() * rstd
        d = g * (1.0 + self.weight.float())
        dx = rstd * (d - xhat * (d * xhat).mean(-1, keepdim=True))
        return dx.to(x.dtype), (g * xhat).sum(0).to(self.weight.dtype)


def autograd_forward(model, grad_out, x, rstd):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + w)
    return fn, [x, model.weight], [grad_out]


def get_inputs(tokens: int = 8192, hidden: int = 3584, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)  # saved by the forward
    return [gen.randn(tokens, hidden, dtype=dtype), x, rstd]


def get_init_inputs(hidden: int = 3584, dtype=torch.bfloat16):
    return [hidden, dtype]
