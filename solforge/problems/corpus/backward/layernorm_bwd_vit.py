"""LayerNorm backward inside ViT blocks (ViT-B/16 width 768, ViT-L/16 width 1024), 197 tokens
per 224x224 image (196 patches and the class token), bf16 data with fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "layernorm_bwd_vit",
    "category": "L1",
    "direction": "backward",
    "family": "ViT",
    "models": ["ViT-B/16", "ViT-L/16"],
    "shapes_from": "google/vit-base-patch16-224 and vit-large-patch16-224 config.json: "
                   "hidden_size 768 / 1024, image_size 224, patch_size 16 (197 tokens), "
                   "layer_norm_eps 1e-12; tokens = images x 197",
    "precision": "bf16_grad",
    "description": "Backward of y = w * (x - mean) * rstd + b over rows of 768/1024: inputs "
                   "grad_out, x, saved fp32 mean and rstd; returns dx, dweight, dbias. The "
                   "token count (images x 197) is not a power of two.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 2 * 5, "hidden": 96}, "cpu": True},
        {"name": "train_b32_base", "params": {"tokens": 32 * 197, "hidden": 768}},
        {"name": "train_b64_large", "params": {"tokens": 64 * 197, "hidden": 1024}},
        {"name": "train_b128_base", "params": {"tokens": 128 * 197, "hidden": 768},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 3 * 11, "hidden": 176}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 12 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 8 * p["tokens"] + 8 * p["hidden"],
}

EPS = 1e-12


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


def autograd_forward(model, grad_out, x, mean, rstd):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, w, b):
        return nn.functional.layer_norm(x, x.shape[-1:], w, b, EPS)
    return fn, [x, model.weight, model.bias], [grad_out]


def get_inputs(tokens: int = 12608, hidden: int = 768, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype, scale=2.0)
    xf = x.float()  # mean and rstd as the forward saves them (fp32)
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + EPS)
    return [gen.randn(tokens, hidden, dtype=dtype), x, mean, rstd]


def get_init_inputs(hidden: int = 768, dtype=torch.bfloat16):
    return [hidden, dtype]
