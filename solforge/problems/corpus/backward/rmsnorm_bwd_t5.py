"""T5's layer norm backward (T5LayerNorm: no mean subtraction, no bias, variance in fp32),
d_model 768 (t5-v1_1-base) and 1024 (t5-v1_1-large), encoder sequences of 512, bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rmsnorm_bwd_t5",
    "category": "L1",
    "direction": "backward",
    "family": "T5",
    "models": ["T5 v1.1 base", "T5 v1.1 large"],
    "shapes_from": "google/t5-v1_1-base and -large config.json: d_model 768 / 1024, "
                   "layer_norm_epsilon 1e-6; tokens = batch x 512 (the pre-training length)",
    "precision": "bf16_grad",
    "description": "Backward of T5LayerNorm y = w * (x * rstd), rstd from the fp32 mean of "
                   "squares (eps 1e-6): inputs grad_out, x, saved rstd; returns dx and dweight.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "hidden": 96}, "cpu": True},
        {"name": "train_b8_base", "params": {"tokens": 8 * 512, "hidden": 768}},
        {"name": "train_b32_base", "params": {"tokens": 32 * 512, "hidden": 768}},
        {"name": "train_b16_large", "params": {"tokens": 16 * 512, "hidden": 1024},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 21, "hidden": 200}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 9 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 4 * p["tokens"] + 4 * p["hidden"],
}

EPS = 1e-6


class Model(nn.Module):
    def __init__(self, hidden: int = 768, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))

    def forward(self, grad_out: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor):
        g = grad_out.float()
        xhat = x.float() * rstd
        dxhat = g * self.weight.float()
        dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True))
        return dx.to(x.dtype), (g * xhat).sum(0).to(self.weight.dtype)


def autograd_forward(model, grad_out, x, rstd):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))
    return fn, [x, model.weight], [grad_out]


def get_inputs(tokens: int = 8192, hidden: int = 768, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)  # saved by the forward
    return [gen.randn(tokens, hidden, dtype=dtype), x, rstd]


def get_init_inputs(hidden: int = 768, dtype=torch.bfloat16):
    return [hidden, dtype]
