"""Selective scan (the S6 recurrence) of a Mamba block, as mamba_ssm's selective_scan_ref
writes it: softplus(delta + bias), discretize A and B, a sequential scan over time, C readout,
D skip, SiLU(z) gate. bf16 activations, fp32 state and parameters."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "selective_scan_mamba",
    "category": "L2",
    "models": ["Mamba 2.8B", "Mamba 1.4B", "Mamba 130M"],
    "family": "Mamba",
    "shapes_from": "config.json of state-spaces/mamba-2.8b (d_inner 5120, d_state 16), mamba-1.4b "
                   "(d_inner 4096) and mamba-130m",
    "precision": "bf16",
    # an fp32 recurrence with no GEMM in it: its FLOPs run on the SIMT units
    "sol_unit": "fp32",
    "description": "h_t = exp(dt_t A) * h_{t-1} + dt_t B_t u_t per channel (state 16), "
                   "y_t = C_t . h_t + D u_t, out = y * SiLU(z), with dt = softplus(delta + "
                   "bias); inputs (batch, d_inner, seq) and B/C (batch, 16, seq).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "d_inner": 24, "d_state": 16, "seq": 17},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "d_inner": 37, "d_state": 16, "seq": 29},
         "cpu": True, "visible": False},
        {"name": "cpu_single_step", "params": {"batch": 3, "d_inner": 40, "d_state": 16,
                                               "seq": 1}, "cpu": True, "visible": False},
        {"name": "mamba2p8b_b1_s256", "params": {"batch": 1, "d_inner": 5120, "d_state": 16,
                                                 "seq": 256}},
        {"name": "mamba1p4b_b4_s256", "params": {"batch": 4, "d_inner": 4096, "d_state": 16,
                                                 "seq": 256}},
        {"name": "mamba130m_b16_s256", "params": {"batch": 16, "d_inner": 1536, "d_state": 16,
                                                  "seq": 256}, "visible": False},
    ],
    # per (b, d, t, n): exp(dt A), dt B u, the state update, the C readout; per (b, d, t):
    # softplus, the D skip and the SiLU gate
    "flops": lambda p: p["batch"] * p["d_inner"] * p["seq"] * (10 * p["d_state"] + 12),
    # u, delta, z in and y out (bf16), B and C (bf16), A (fp32), D and the bias (fp32)
    "bytes": lambda p: 2 * p["batch"] * p["seq"] * (4 * p["d_inner"] + 2 * p["d_state"])
    + 4 * p["d_inner"] * (p["d_state"] + 2),
}


class Model(nn.Module):
    def __init__(self, d_inner: int = 5120, d_state: int = 16):
        super().__init__()
        # S4D-real init of A, perturbed as training leaves it; Mamba keeps A_log and D in fp32
        a = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        self.A_log = nn.Parameter(torch.log(a) + 0.1 * torch.randn(d_inner, d_state))
        self.D = nn.Parameter(1.0 + 0.1 * torch.randn(d_inner))
        # dt_proj bias: inverse softplus of dt drawn log-uniformly in [1e-3, 1e-1]
        dt = torch.exp(torch.rand(d_inner) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.delta_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))

    def forward(self, u, delta, B, C, z):
        dtype_in = u.dtype
        A = -torch.exp(self.A_log.float())
        u, delta = u.float(), delta.float()
        delta = F.softplus(delta + self.delta_bias[..., None].float())
        batch, dim, dstate = u.shape[0], A.shape[0], A.shape[1]
        B, C = B.float(), C.float()
        x = A.new_zeros((batch, dim, dstate))
        ys = []
        delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
        delta_b_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
        for i in range(u.shape[2]):
            x = delta_a[:, :, i] * x + delta_b_u[:, :, i]
            ys.append(torch.einsum("bdn,bn->bd", x, C[:, :, i]))
        y = torch.stack(ys, dim=2)  # (batch, dim, seq)
        out = y + u * self.D[:, None].float()
        out = out * F.silu(z.float())
        return out.to(dtype_in)


def get_inputs(batch: int = 1, d_inner: int = 5120, d_state: int = 16, seq: int = 512,
               dtype=torch.bfloat16):
    u = gen.randn(batch, d_inner, seq, dtype=dtype)
    delta = gen.randn(batch, d_inner, seq, dtype=dtype, scale=0.5)  # dt_proj output
    B = gen.randn(batch, d_state, seq, dtype=dtype)
    C = gen.randn(batch, d_state, seq, dtype=dtype)
    z = gen.randn(batch, d_inner, seq, dtype=dtype)
    return [u, delta, B, C, z]


def get_init_inputs(d_inner: int = 5120, d_state: int = 16):
    return [d_inner, d_state]
