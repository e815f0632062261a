"""T5's ReLU feed-forward backward (T5DenseActDense: y = wo(relu(wi x)), no biases; t5-base 768
-> 3072, t5-large 1024 -> 4096, sequences of 512): dx, dwi, dwo; bf16 GEMMs."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "relu_ffn_bwd_t5",
    "category": "L2",
    "direction": "backward",
    "family": "T5",
    "models": ["T5 base", "T5 large"],
    "shapes_from": "google-t5/t5-base and t5-large config.json: d_model 768 / 1024, d_ff "
                   "3072 / 4096, feed_forward_proj relu; tokens = batch x 512",
    "precision": "bf16_grad",
    "description": "Backward of y = relu(x wi^T) wo^T. Inputs: grad_y (T, H), x (T, H), wi "
                   "(F, H), wo (H, F) and the saved activation h = relu(x wi^T) (T, F). Returns "
                   "dx = dh wi, dwi = dh^T x and dwo = grad_y^T h, with dh = (grad_y wo) where "
                   "h > 0 and 0 elsewhere (ReLU's gradient at 0 is 0, as torch's).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 16, "hidden": 48, "ffn": 192}, "cpu": True},
        {"name": "train_b16_base", "params": {"tokens": 16 * 512, "hidden": 768, "ffn": 3072}},
        {"name": "train_b16_large", "params": {"tokens": 16 * 512, "hidden": 1024,
                                               "ffn": 4096}},
        {"name": "train_b32_large", "params": {"tokens": 32 * 512, "hidden": 1024,
                                               "ffn": 4096}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 56, "ffn": 144}, "cpu": True,
         "visible": False},
    ],
    # four T x H x F GEMMs (dh, dwo, dx, dwi) and the mask
    "flops": lambda p: 8 * p["tokens"] * p["hidden"] * p["ffn"] + p["tokens"] * p["ffn"],
    "bytes": lambda p: 8 * p["hidden"] * p["ffn"] + 6 * p["tokens"] * p["hidden"]
    + 2 * p["tokens"] * p["ffn"],
}


class Model(nn.Module):
    def forward(self, grad_y, x, wi, wo, h):
        dh = (grad_y @ wo).masked_fill(h <= 0, 0.0)
        return dh @ wi, dh.t() @ x, grad_y.t() @ h


def autograd_forward(model, grad_y, x, wi, wo, h):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return (lambda x, wi, wo: torch.relu(x @ wi.t()) @ wo.t()), [x, wi, wo], [grad_y]


def get_inputs(tokens: int = 8192, hidden: int = 768, ffn: int = 3072, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    wi = gen.randn(ffn, hidden, dtype=dtype, scale=hidden ** -0.5)
    wo = gen.randn(hidden, ffn, dtype=dtype, scale=ffn ** -0.5)
    return [gen.randn(tokens, hidden, dtype=dtype), x, wi, wo, torch.relu(x @ wi.t())]


def get_init_inputs():
    return []
