"""LayerNorm backward at GPT-2's widths (768 small, 1600 XL), context 1024: dx, dweight, dbias,
bf16 data with fp32 math (torch's native_layer_norm_backward saves mean and rstd)."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "layernorm_bwd_gpt2",
    "category": "L1",
    "direction": "backward",
    "family": "GPT-2",
    "models": ["GPT-2 small", "GPT-2 XL"],
    "shapes_from": "openai-community/gpt2 and gpt2-xl config.json: n_embd 768 / 1600, "
                   "n_ctx 1024, layer_norm_epsilon 1e-5; tokens = batch x 1024",
    "precision": "bf16_grad",
    "description": "Backward of y = w * (x - mean) * rstd + b: inputs grad_out, x and the saved "
                   "fp32 mean and rstd; returns dx = rstd * (d - mean(d) - xhat * mean(d * "
                   "xhat)) with d = g * w, dweight = sum of g * xhat and dbias = sum of g.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "hidden": 96}, "cpu": True},
        {"name": "train_b4_small", "params": {"tokens": 4 * 1024, "hidden": 768}},
        {"name": "train_b16_small", "params": {"tokens": 16 * 1024, "hidden": 768}},
        {"name": "train_b8_xl", "params": {"tokens": 8 * 1024, "hidden": 1600}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 25, "hidden": 200}, "cpu": True,
         "visible": False},
    ],
    # per element: xhat, g*w, two row sums, dx (4), dweight and dbias accumulations
    "flops": lambda p: 12 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 8 * p["tokens"] + 8 * p["hidden"],
}


class Model(nn.Module):
    def __init__(self, hidden: int = 768, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))
        self.bias = nn.Parameter((0.1 * torch.randn(hidden, dtype=torch.float32)).to(dtype))

    def forward(self, grad_out, x, mean, rstd):
        g = grad_out.float()
        xhat = (x.float() - mean) * rstd
        d = g * self.weight.float()
        dx = rstd * (d - d.mean(-1, keepdim=True) - xhat * (d * xhat).mean(-1, keepdim=True))
        return (dx.to(x.dtype), (g * xhat).sum(0).to(self.weight.dtype),
                g.sum(0).to(self.bias.dtype))


def autograd_forward(model, grad_out, x, mean, rstd, eps: float = 1e-5):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, w, b):
        return nn.functional.layer_norm(x, x.shape[-1:], w, b, eps)
    return fn, [x, model.weight, model.bias], [grad_out]


def get_inputs(tokens: int = 8192, hidden: int = 768, dtype=torch.bfloat16, eps: float = 1e-5):
    x = gen.randn(tokens, hidden, dtype=dtype)
    xf = x.float()  # mean and rstd as the forward saves them (fp32)
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + eps)
    return [gen.randn(tokens, hidden, dtype=dtype), x, mean, rstd]


def get_init_inputs(hidden: int = 768, dtype=torch.bfloat16):
    return [hidden, dtype]
