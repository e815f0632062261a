"""SwiGLU activation backward as Llama 3's MLP trains it (h = silu(gate) * up; intermediate
14336 for 8B, 28672 for 70B): dgate and dup from the upstream gradient; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "swiglu_act_bwd_llama3",
    "category": "L1",
    "direction": "backward",
    "family": "Llama 3",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "shapes_from": "meta-llama/Meta-Llama-3-8B and -70B config.json: intermediate_size 14336 "
                   "/ 28672, hidden_act silu; 70B at tensor parallelism 8 (3584 per GPU)",
    "precision": "bf16_grad",
    "description": "Backward of h = silu(gate) * up (the projections' saved outputs, bf16): "
                   "returns dgate = grad_h * up * sigmoid(gate) * (1 + gate * (1 - "
                   "sigmoid(gate))) and dup = grad_h * silu(gate), fp32 math (as fused kernels "
                   "do), bf16 results.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "inter": 160}, "cpu": True},
        {"name": "train_4k_8b", "params": {"tokens": 4096, "inter": 14336}},
        {"name": "train_8k_8b", "params": {"tokens": 8192, "inter": 14336}},
        {"name": "train_16k_70b_tp8", "params": {"tokens": 16384, "inter": 3584},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "inter": 333}, "cpu": True,
         "visible": False},
    ],
    # per element: sigmoid (exp, add, div), silu, its derivative (4), two products
    "flops": lambda p: 12 * p["tokens"] * p["inter"],
    # grad_h, gate, up read, dgate, dup written (bf16)
    "bytes": lambda p: 10 * p["tokens"] * p["inter"],
}


class Model(nn.Module):
    def forward(self, grad_h, gate, up):
        g, u, dh = gate.float(), up.float(), grad_h.float()
        sig = torch.sigmoid(g)
        dgate = dh * u * sig * (1.0 + g * (1.0 - sig))
        dup = dh * g * sig
        return dgate.to(gate.dtype), dup.to(up.dtype)


def autograd_forward(model, grad_h, gate, up):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return (lambda g, u: nn.functional.silu(g) * u), [gate, up], [grad_h]


def get_inputs(tokens: int = 8192, inter: int = 14336, dtype=torch.bfloat16):
    # gate pre-activations of a trained MLP spread over a few units: silu's bend matters
    gate = gen.randn(tokens, inter, dtype=dtype, scale=2.0)
    up = gen.randn(tokens, inter, dtype=dtype)
    return [gen.randn(tokens, inter, dtype=dtype), gate, up]


def get_init_inputs():
    return []
