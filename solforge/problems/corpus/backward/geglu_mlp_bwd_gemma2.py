"""The whole GeGLU MLP backward of a Gemma 2 block (y = down(gelu_tanh(x Wg^T) * (x Wu^T))): dx
and the three projections' weight gradients; bf16 GEMMs with fp32 accumulation."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "geglu_mlp_bwd_gemma2",
    "category": "L2",
    "direction": "backward",
    "family": "Gemma 2",
    "models": ["Gemma 2 2B", "Gemma 2 9B"],
    "shapes_from": "google/gemma-2-2b config.json: hidden_size 2304, intermediate_size 9216, "
                   "hidden_activation gelu_pytorch_tanh; gemma-2-9b: 3584, 14336",
    "precision": "bf16_grad",
    "description": "Gemma2MLP backward. Inputs: grad_y (T, H), x (T, H), and the saved "
                   "projections gate = x Wg^T and up = x Wu^T (T, I); weights Wg, Wu (I, H) and "
                   "Wd (H, I) are the model's. Returns dx = dgate Wg + dup Wu, dWg = dgate^T x, "
                   "dWu = dup^T x, dWd = grad_y^T h, with h = gelu_tanh(gate) * up, dh = grad_y "
                   "Wd, dgate = dh * up * gelu_tanh'(gate), dup = dh * gelu_tanh(gate) (elementwise in fp32, "
                   "rounded to bf16 before the GEMMs as a bf16 training step does).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 12, "hidden": 64, "inter": 160}, "cpu": True},
        {"name": "train_8k_2b", "params": {"tokens": 8192, "hidden": 2304, "inter": 9216}},
        {"name": "train_4k_9b", "params": {"tokens": 4096, "hidden": 3584, "inter": 14336}},
        {"name": "train_16k_2b", "params": {"tokens": 16384, "hidden": 2304, "inter": 9216},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 19, "hidden": 96, "inter": 200}, "cpu": True,
         "visible": False},
    ],
    # six T x H x I GEMMs (dh, dWd, two for dx, dWg, dWu) and the elementwise part
    "flops": lambda p: 12 * p["tokens"] * p["hidden"] * p["inter"] + 12 * p["tokens"] * p["inter"],
    # three weights read and their gradients written; grad_y, x, dx; gate and up (bf16)
    "bytes": lambda p: 12 * p["hidden"] * p["inter"] + 6 * p["tokens"] * p["hidden"]
    + 4 * p["tokens"] * p["inter"],
}


C = math.sqrt(2.0 / math.pi)


class Model(nn.Module):
    def forward(self, grad_y, x, w_gate, w_up, w_down, gate, up):
        dt = x.dtype
        g, u = gate.float(), up.float()
        t = torch.tanh(C * (g + 0.044715 * g ** 3))
        act = 0.5 * g * (1.0 + t)
        dact = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * C * (1.0 + 3 * 0.044715 * g * g)
        h = (act * u).to(dt)
        dh = (grad_y @ w_down).float()
        dgate = (dh * u * dact).to(dt)
        dup = (dh * act).to(dt)
        dx = dgate @ w_gate + dup @ w_up
        return dx, dgate.t() @ x, dup.t() @ x, grad_y.t() @ h


def autograd_forward(model, grad_y, x, w_gate, w_up, w_down, gate, up):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, wg, wu, wd):
        return (nn.functional.gelu(x @ wg.t(), approximate="tanh") * (x @ wu.t())) @ wd.t()
    return fn, [x, w_gate, w_up, w_down], [grad_y]


def get_inputs(tokens: int = 8192, hidden: int = 2304, inter: int = 9216,
               dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    wg = gen.randn(inter, hidden, dtype=dtype, scale=hidden ** -0.5)
    wu = gen.randn(inter, hidden, dtype=dtype, scale=hidden ** -0.5)
    wd = gen.randn(hidden, inter, dtype=dtype, scale=inter ** -0.5)
    # gate and up as the forward saved them; scaled by 2 so GELU's bend matters
    wg = (wg.float() * 2.0).to(dtype)
    return [gen.randn(tokens, hidden, dtype=dtype), x, wg, wu, wd, x @ wg.t(), x @ wu.t()]


def get_init_inputs():
    return []
