"""Mamba-2's state-space duality (SSD) scan in its chunked form (the paper's
ssd_minimal_discrete, what mamba_chunk_scan_combined computes): within each chunk a masked
(C B^T * decay) X product, across chunks a recurrence over the chunk states; per-head scalar
decay A * dt, B and C shared by the heads of a group. The D skip and the gate are not
included; fp32 (the scan runs in fp32 from bf16 projections)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "ssd_chunk_scan_mamba2",
    "category": "L2",
    "models": ["Mamba-2 2.7B", "Mamba-2 1.3B", "Codestral Mamba 7B"],
    "family": "Mamba-2",
    "shapes_from": "config.json of state-spaces/mamba2-2.7b (d_model 2560, expand 2 -> d_inner "
                   "5120, headdim 64 -> 80 heads, d_state 128, ngroups 1, chunk_size 256) and "
                   "mistralai/Mamba-Codestral-7B-v0.1 (d_inner 8192, 128 heads, ngroups 8)",
    "precision": "tf32",
    "description": "x (b, l, h, p), dt (b, l, h) > 0, A (h,) < 0, B, C (b, l, g, n): the output of "
                   "h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T, y_t = C_t h_t from a zero state; "
                   "(b, l, h, p).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 32, "heads": 2, "head_dim": 4,
                                         "groups": 1, "state": 8, "chunk": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 24, "heads": 4, "head_dim": 8,
                                       "groups": 2, "state": 4, "chunk": 6}, "cpu": True,
         "visible": False},
        {"name": "prefill_b1_s4096_2p7b", "params": {"batch": 1, "seq": 4096, "heads": 80,
                                                     "head_dim": 64, "groups": 1, "state": 128,
                                                     "chunk": 256}},
        {"name": "prefill_b4_s2048_2p7b", "params": {"batch": 4, "seq": 2048, "heads": 80,
                                                     "head_dim": 64, "groups": 1, "state": 128,
                                                     "chunk": 256}},
        {"name": "prefill_b1_s4096_codestral", "params": {"batch": 1, "seq": 4096,
                                                          "heads": 128, "head_dim": 64,
                                                          "groups": 8, "state": 128,
                                                          "chunk": 256}, "visible": False},
    ],
    # intra-chunk C B^T and its product with X, plus the state terms:
    # ~ 2 l h (chunk (n + p) + 2 n p)
    "flops": lambda p: 2 * p["batch"] * p["seq"] * p["heads"]
    * (p["chunk"] * (p["state"] + p["head_dim"]) + 2 * p["state"] * p["head_dim"]),
    "bytes": lambda p: 4 * p["batch"] * p["seq"] * (2 * p["heads"] * p["head_dim"] + p["heads"]
                                                    + 2 * p["groups"] * p["state"]),
}


def segsum(x: torch.Tensor) -> torch.Tensor:
    """Stable segment sums: out[..., i, j] = sum(x[..., j+1 : i+1]) for j <= i, else -inf."""
    idx = torch.arange(x.size(-1), device=x.device)
    x = x.unsqueeze(-1) + torch.zeros_like(x).unsqueeze(-2)  # x[..., i, j] = x[i]
    x = x.masked_fill(idx[:, None] <= idx[None, :], 0)  # keep i > j
    s = torch.cumsum(x, dim=-2)
    return s.masked_fill(idx[:, None] < idx[None, :], float("-inf"))  # keep i >= j


class Model(nn.Module):
    def __init__(self, heads: int = 80, groups: int = 1, chunk: int = 256):
        super().__init__()
        self.rep, self.chunk = heads // groups, chunk

    def forward(self, x, dt, A, B, C):
        b, length, h, p = x.shape
        c, q = length // self.chunk, self.chunk
        X = (x * dt[..., None]).view(b, c, q, h, p)
        Ad = (dt * A).view(b, c, q, h).permute(0, 3, 1, 2)  # (b, h, c, q)
        B = B.repeat_interleave(self.rep, dim=2).view(b, c, q, h, -1)
        C = C.repeat_interleave(self.rep, dim=2).view(b, c, q, h, -1)
        A_cum = torch.cumsum(Ad, dim=-1)
        L = torch.exp(segsum(Ad))
        y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", C, B, L, X)
        decay_states = torch.exp(A_cum[..., -1:] - A_cum)
        states = torch.einsum("bclhn,bhcl,bclhp->bchpn", B, decay_states, X)
        states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
        decay_chunk = torch.exp(segsum(F.pad(A_cum[..., -1], (1, 0))))
        states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
        y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", C, states, torch.exp(A_cum))
        return (y_diag + y_off).reshape(b, length, h, p)


def get_inputs(batch: int = 1, seq: int = 4096, heads: int = 80, head_dim: int = 64,
               groups: int = 1, state: int = 128):
    x = gen.randn(batch, seq, heads, head_dim)
    dt = gen.uniform(batch, seq, heads, low=0.001, high=0.1)  # softplus(dt + dt_bias) range
    A = -gen.uniform(heads, low=1.0, high=16.0)  # -exp(A_log), A_log init log U[1, 16]
    B = gen.randn(batch, seq, groups, state, scale=state ** -0.5)
    C = gen.randn(batch, seq, groups, state)
    return [x, dt, A, B, C]


def get_init_inputs(heads: int = 80, groups: int = 1, chunk: int = 256):
    return [heads, groups, chunk]
