"""Jamba's Mamba-layer parameter path (HF JambaMambaMixer.slow_forward): the x_proj output is
split into the time-step (dt_rank 256), B and C (d_state 16 each) parts, each RMS-normalized
with its own weight (Jamba's addition to Mamba), then dt goes through dt_proj (256 -> d_inner,
bias) and softplus; returns (dt, B, C); bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "dt_bc_norm_jamba",
    "category": "L2",
    "models": ["Jamba v0.1 52B", "Jamba 1.5 Mini"],
    "family": "Jamba",
    "shapes_from": "config.json of ai21labs/Jamba-v0.1 (hidden_size 4096, mamba_expand 2 -> "
                   "d_inner 8192, mamba_dt_rank 256, mamba_d_state 16, rms_norm_eps 1e-6) and "
                   "AI21-Jamba-1.5-Mini (same mixer sizes)",
    "precision": "bf16",
    "description": "p (tokens, 256 + 16 + 16) -> dt, B, C = split; each RMSNorm'd (eps 1e-6); dt = "
                   "softplus(dt_proj(dt)) (tokens, 8192).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "dt_rank": 8, "state": 4, "d_inner": 32},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "dt_rank": 6, "state": 3, "d_inner": 20},
         "cpu": True, "visible": False},
        {"name": "decode_b64", "params": {"tokens": 64, "dt_rank": 256, "state": 16,
                                          "d_inner": 8192}},
        {"name": "prefill_8k", "params": {"tokens": 8192, "dt_rank": 256, "state": 16,
                                          "d_inner": 8192}},
        {"name": "prefill_2k", "params": {"tokens": 2048, "dt_rank": 256, "state": 16,
                                          "d_inner": 8192}, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["dt_rank"] * p["d_inner"]
    + 4 * p["tokens"] * p["d_inner"],
    "bytes": lambda p: 2 * (p["tokens"] * (2 * p["dt_rank"] + 4 * p["state"] + p["d_inner"])
                            + p["dt_rank"] * p["d_inner"]),
}


class Model(nn.Module):
    def __init__(self, dt_rank: int = 256, state: int = 16, d_inner: int = 8192,
                 eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.dt_rank, self.state, self.eps = dt_rank, state, eps
        self.dt_norm = nn.Parameter((1 + 0.1 * torch.randn(dt_rank)).to(dtype))
        self.b_norm = nn.Parameter((1 + 0.1 * torch.randn(state)).to(dtype))
        self.c_norm = nn.Parameter((1 + 0.1 * torch.randn(state)).to(dtype))
        self.dt_proj = nn.Linear(dt_rank, d_inner, dtype=dtype)
        nn.init.normal_(self.dt_proj.weight, std=dt_rank ** -0.5)
        with torch.no_grad():  # Mamba's dt bias: softplus^-1 of dt in [1e-3, 0.1]
            dt = torch.exp(torch.rand(d_inner) * (torch.log(torch.tensor(0.1)) - torch.log(
                torch.tensor(1e-3))) + torch.log(torch.tensor(1e-3)))
            self.dt_proj.bias.copy_((dt + torch.log(-torch.expm1(-dt))).to(dtype))

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def forward(self, params: torch.Tensor):
        dt = self._rms(params[..., :self.dt_rank], self.dt_norm)
        B = self._rms(params[..., self.dt_rank:self.dt_rank + self.state], self.b_norm)
        C = self._rms(params[..., self.dt_rank + self.state:], self.c_norm)
        return F.softplus(self.dt_proj(dt)), B, C


def get_inputs(tokens: int = 64, dt_rank: int = 256, state: int = 16, dtype=torch.bfloat16):
    return [gen.randn(tokens, dt_rank + 2 * state, dtype=dtype)]


def get_init_inputs(dt_rank: int = 256, state: int = 16, d_inner: int = 8192,
                    dtype=torch.bfloat16):
    return [dt_rank, state, d_inner, 1e-6, dtype]
