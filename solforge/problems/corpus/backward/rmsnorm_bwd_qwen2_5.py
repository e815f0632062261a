"""RMSNorm backward at Qwen2.5's widths (hidden 3584 for 7B, 5120 for 32B), eps 1e-6, bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rmsnorm_bwd_qwen2_5",
    "category": "L1",
    "direction": "backward",
    "family": "Qwen2.5",
    "models": ["Qwen2.5 7B", "Qwen2.5 32B"],
    "shapes_from": "Qwen/Qwen2.5-7B and -32B config.json: hidden_size 3584 / 5120, "
                   "rms_norm_eps 1e-6; tokens = micro-batch x sequence",
    "precision": "bf16_grad",
    "description": "Backward of Qwen2RMSNorm y = w * (x * rstd) in fp32 (eps 1e-6): inputs "
                   "grad_out, x and the saved fp32 rstd; returns dx and dweight (summed over "
                   "tokens). Its eps is 10x smaller than Llama's: rows of small norm weigh more.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 9, "hidden": 224}, "cpu": True},
        {"name": "train_2k_7b", "params": {"tokens": 2048, "hidden": 3584}},
        {"name": "train_8k_7b", "params": {"tokens": 8192, "hidden": 3584}},
        {"name": "train_16k_32b", "params": {"tokens": 16384, "hidden": 5120}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 31, "hidden": 448}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 9 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 4 * p["tokens"] + 4 * p["hidden"],
}

EPS = 1e-6


class Model(nn.Module):
    def __init__(self, hidden: int = 3584, dtype=torch.bfloat16):
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
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return fn, [x, model.weight], [grad_out]


def get_inputs(tokens: int = 8192, hidden: int = 3584, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)  # saved by the forward
    return [gen.randn(tokens, hidden, dtype=dtype), x, rstd]


def get_init_inputs(hidden: int = 3584, dtype=torch.bfloat16):
    return [hidden, dtype]
