"""Backward of the fused residual add + RMSNorm that opens each Mistral 7B block (h = x +
residual; y = rmsnorm(h) * w; both y and h go on): the residual stream's gradient and the
norm's, summed; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "add_rmsnorm_bwd_mistral",
    "category": "L2",
    "direction": "backward",
    "family": "Mistral",
    "models": ["Mistral 7B v0.3"],
    "shapes_from": "mistralai/Mistral-7B-v0.3 config.json: hidden_size 4096, rms_norm_eps "
                   "1e-5; tokens = micro-batch x sequence",
    "precision": "bf16_grad",
    "description": "Forward: h = x + residual, y = w * h * rstd(h). Backward inputs: grad_y, "
                   "grad_h (the residual stream's gradient from the layers above), the saved h "
                   "and fp32 rstd; returns dh = grad_h + rmsnorm_backward(grad_y) (which is "
                   "both dx and dresidual) and dweight = sum of grad_y * hhat.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 128}, "cpu": True},
        {"name": "train_4k", "params": {"tokens": 4096, "hidden": 4096}},
        {"name": "train_8k", "params": {"tokens": 8192, "hidden": 4096}},
        {"name": "train_16k", "params": {"tokens": 16384, "hidden": 4096}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 29, "hidden": 328}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 10 * p["tokens"] * p["hidden"],
    # grad_y, grad_h, h read and dh written (bf16)
    "bytes": lambda p: 8 * p["tokens"] * p["hidden"] + 4 * p["tokens"] + 4 * p["hidden"],
}

EPS = 1e-5


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))

    def forward(self, grad_y, grad_h, h, rstd):
        g = grad_y.float()
        hhat = h.float() * rstd
        d = g * self.weight.float()
        dh = grad_h.float() + rstd * (d - hhat * (d * hhat).mean(-1, keepdim=True))
        return dh.to(h.dtype), (g * hhat).sum(0).to(self.weight.dtype)


def autograd_forward(model, grad_y, grad_h, h, rstd):
    """The forward this problem differentiates (tests/problems/test_backward.py): from h on,
    since x and residual enter only through their sum."""
    def fn(h, w):
        return w * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS), h * 1.0
    return fn, [h, model.weight], [grad_y, grad_h]


def get_inputs(tokens: int = 8192, hidden: int = 4096, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden)
    residual = gen.randn(tokens, hidden, scale=2.0)
    h = (x + residual).to(dtype)
    rstd = torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + EPS)  # saved by the forward
    return [gen.randn(tokens, hidden, dtype=dtype), gen.randn(tokens, hidden, dtype=dtype),
            h, rstd]


def get_init_inputs(hidden: int = 4096, dtype=torch.bfloat16):
    return [hidden, dtype]
