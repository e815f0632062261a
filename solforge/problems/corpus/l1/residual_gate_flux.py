"""Gated residual add of DiT-style blocks (adaLN-Zero gate): x + gate[:, None] * y; Flux, SD3."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "residual_gate_flux",
    "category": "L1",
    "models": ["FLUX.1-dev", "Stable Diffusion 3"],
    "family": "Flux",
    "shapes_from": "FLUX.1-dev transformer config (hidden 3072 = 24 heads x 128; 4096 image "
                   "tokens at 1024px plus 512 text tokens)",
    "precision": "bf16",
    "description": "out = x + gate.unsqueeze(1) * y with x, y [batch, tokens, dim] and a per- "
                   "sample gate [batch, dim] from adaLN modulation (diffusers "
                   "FluxTransformerBlock, SD3JointTransformerBlock), bf16.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "tokens": 7, "dim": 257}, "cpu": True},
        {"name": "flux_512px_b1", "params": {"batch": 1, "tokens": 1024, "dim": 3072}},
        {"name": "flux_1024px_single_b1", "params": {"batch": 1, "tokens": 4608, "dim": 3072}},
        {"name": "sd3_1024px_cfg_b2", "params": {"batch": 2, "tokens": 4096, "dim": 1536},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "tokens": 13, "dim": 509}, "cpu": True,
         "visible": False},
    ],
    # one product and one add per element
    "flops": lambda p: 2 * p["batch"] * p["tokens"] * p["dim"],
    # x and y read, out written, gate read once (bf16)
    "bytes": lambda p: 2 * (3 * p["batch"] * p["tokens"] * p["dim"] + p["batch"] * p["dim"]),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, hidden_states: torch.Tensor, attn_output: torch.Tensor,
                gate: torch.Tensor) -> torch.Tensor:
        attn_output = gate.unsqueeze(1) * attn_output
        return hidden_states + attn_output


def get_inputs(batch: int = 1, tokens: int = 4608, dim: int = 3072, dtype=torch.bfloat16):
    x = gen.randn(batch, tokens, dim, dtype=dtype)
    y = gen.randn(batch, tokens, dim, dtype=dtype)
    gate = gen.randn(batch, dim, dtype=dtype, scale=0.5)
    return [x, y, gate]


def get_init_inputs():
    return []
