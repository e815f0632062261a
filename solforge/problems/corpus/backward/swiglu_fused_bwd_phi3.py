"""Phi-3's fused gate/up SwiGLU backward: the MLP's one gate_up_proj output (T, 2 x 8192) is
split in halves, gate first; the gradient is one (T, 16384) tensor; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "swiglu_fused_bwd_phi3",
    "category": "L1",
    "direction": "backward",
    "family": "Phi-3",
    "models": ["Phi-3 mini", "Phi-3 medium"],
    "shapes_from": "microsoft/Phi-3-mini-4k-instruct config.json: intermediate_size 8192 "
                   "(gate_up_proj out 16384), hidden_act silu; Phi-3-medium: 17920",
    "precision": "bf16_grad",
    "description": "Backward of h = silu(gu[:, :I]) * gu[:, I:] (Phi3MLP: gate_up_proj then "
                   "chunk(2, dim=-1)): input grad_h (T, I) and the saved gu (T, 2I); returns "
                   "d_gu (T, 2I): the gate half's and the up half's gradients side by side.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "inter": 96}, "cpu": True},
        {"name": "train_4k_mini", "params": {"tokens": 4096, "inter": 8192}},
        {"name": "train_16k_mini", "params": {"tokens": 16384, "inter": 8192}},
        {"name": "train_8k_medium", "params": {"tokens": 8192, "inter": 17920},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 17, "inter": 250}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 12 * p["tokens"] * p["inter"],
    # grad_h read, gu read and d_gu written (bf16)
    "bytes": lambda p: 10 * p["tokens"] * p["inter"],
}


class Model(nn.Module):
    def forward(self, grad_h, gate_up):
        g, u = gate_up.float().chunk(2, dim=-1)
        dh = grad_h.float()
        sig = torch.sigmoid(g)
        dgate = dh * u * sig * (1.0 + g * (1.0 - sig))
        return torch.cat([dgate, dh * g * sig], dim=-1).to(gate_up.dtype)


def autograd_forward(model, grad_h, gate_up):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(gu):
        g, u = gu.chunk(2, dim=-1)
        return nn.functional.silu(g) * u
    return fn, [gate_up], [grad_h]


def get_inputs(tokens: int = 8192, inter: int = 8192, dtype=torch.bfloat16):
    gate = gen.randn(tokens, inter, scale=2.0)
    up = gen.randn(tokens, inter)
    return [gen.randn(tokens, inter, dtype=dtype), torch.cat([gate, up], -1).to(dtype)]


def get_init_inputs():
    return []
