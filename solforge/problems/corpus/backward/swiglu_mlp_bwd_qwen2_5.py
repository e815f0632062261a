"""The whole SwiGLU MLP backward of a Qwen2.5 block (y = down(silu(x Wg^T) * (x Wu^T))): dx and
the three projections' weight gradients; bf16 GEMMs with fp32 accumulation."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "swiglu_mlp_bwd_qwen2_5",
    "category": "L2",
    "direction": "backward",
    "family": "Qwen2.5",
    "models": ["Qwen2.5 7B", "Qwen2.5 1.5B"],
    "shapes_from": "Qwen/Qwen2.5-7B config.json: hidden_size 3584, intermediate_size 18944; "
                   "Qwen2.5-1.5B: 1536, 8960; tokens = micro-batch x sequence",
    "precision": "bf16_grad",
    "description": "Qwen2MLP backward. Inputs: grad_y (T, H), x (T, H), and the saved "
                   "projections gate = x Wg^T and up = x Wu^T (T, I); weights Wg, Wu (I, H) and "
                   "Wd (H, I) are the model's. Returns dx = dgate Wg + dup Wu, dWg = dgate^T x, "
                   "dWu = dup^T x, dWd = grad_y^T h, with h = silu(gate) * up, dh = grad_y Wd, "
                   "dgate = dh * up * silu'(gate), dup = dh * silu(gate) (elementwise in fp32, "
                   "rounded to bf16 before the GEMMs as a bf16 training step does).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 12, "hidden": 64, "inter": 160}, "cpu": True},
        {"name": "train_4k_7b", "params": {"tokens": 4096, "hidden": 3584, "inter": 18944}},
        {"name": "train_8k_1_5b", "params": {"tokens": 8192, "hidden": 1536, "inter": 8960}},
        {"name": "train_16k_7b", "params": {"tokens": 16384, "hidden": 3584, "inter": 18944},
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


class Model(nn.Module):
    def forward(self, grad_y, x, w_gate, w_up, w_down, gate, up):
        dt = x.dtype
        g, u = gate.float(), up.float()
        sig = torch.sigmoid(g)
        h = (g * sig * u).to(dt)
        dh = (grad_y @ w_down).float()
        dgate = (dh * u * sig * (1.0 + g * (1.0 - sig))).to(dt)
        dup = (dh * g * sig).to(dt)
        dx = dgate @ w_gate + dup @ w_up
        return dx, dgate.t() @ x, dup.t() @ x, grad_y.t() @ h


def autograd_forward(model, grad_y, x, w_gate, w_up, w_down, gate, up):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, wg, wu, wd):
        return (nn.functional.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()
    return fn, [x, w_gate, w_up, w_down], [grad_y]


def get_inputs(tokens: int = 4096, hidden: int = 3584, inter: int = 18944,
               dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    wg = gen.randn(inter, hidden, dtype=dtype, scale=hidden ** -0.5)
    wu = gen.randn(inter, hidden, dtype=dtype, scale=hidden ** -0.5)
    wd = gen.randn(hidden, inter, dtype=dtype, scale=inter ** -0.5)
    # gate and up as the forward saved them; scaled by 2 so silu's bend matters
    wg = (wg.float() * 2.0).to(dtype)
    return [gen.randn(tokens, hidden, dtype=dtype), x, wg, wu, wd, x @ wg.t(), x @ wu.t()]


def get_init_inputs():
    return []
