"""LayerNorm backward at BERT's widths (768 base, 1024 large), sequences of 512, eps 1e-12 (so
rstd of a near-constant row is huge), bf16 data with fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "layernorm_bwd_bert",
    "category": "L1",
    "direction": "backward",
    "family": "BERT",
    "models": ["BERT base", "BERT large"],
    "shapes_from": "google-bert/bert-base-uncased and bert-large-uncased config.json: "
                   "hidden_size 768 / 1024, max_position_embeddings 512, layer_norm_eps 1e-12",
    "precision": "bf16_grad",
    "description": "Backward of BertLayerNorm y = w * (x - mean) * rstd + b (eps 1e-12): inputs "
                   "grad_out, x, saved fp32 mean and rstd; returns dx, dweight, dbias. The "
                   "activations carry a per-row offset (post-residual hidden states are not "
                   "centred), so a kernel that drops the mean term fails.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 8, "hidden": 64}, "cpu": True},
        {"name": "train_b8_large", "params": {"tokens": 8 * 512, "hidden": 1024}},
        {"name": "train_b32_base", "params": {"tokens": 32 * 512, "hidden": 768}},
        {"name": "train_b32_large", "params": {"tokens": 32 * 512, "hidden": 1024},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 19, "hidden": 136}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 12 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 8 * p["tokens"] + 8 * p["hidden"],
}

EPS = 1e-12


class Model(nn.Module):
    def __init__(self, hidden: int = 1024, dtype=torch.bfloat16):
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


def get_inputs(tokens: int = 8192, hidden: int = 1024, dtype=torch.bfloat16):
    offset = gen.randn(tokens, 1)  # a per-token shift, as residual streams carry
    x = (gen.randn(tokens, hidden) + offset).to(dtype)
    xf = x.float()  # mean and rstd as the forward saves them (fp32)
    mean = xf.mean(-1, keepdim=True)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + EPS)
    return [gen.randn(tokens, hidden, dtype=dtype), x, mean, rstd]


def get_init_inputs(hidden: int = 1024, dtype=torch.bfloat16):
    return [hidden, dtype]
