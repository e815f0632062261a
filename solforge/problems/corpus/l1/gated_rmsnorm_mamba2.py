"""Mamba-2's gated RMSNorm before out_proj (mamba_ssm RMSNormGated, norm_before_gate=False,
HF MambaRMSNormGated): y = RMSNorm(x * SiLU(z)) * w, normalized per group of
d_inner / ngroups channels, in fp32, cast back; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "gated_rmsnorm_mamba2",
    "category": "L1",
    "models": ["Mamba-2 2.7B", "Codestral Mamba 7B"],
    "family": "Mamba-2",
    "shapes_from": "config.json of state-spaces/mamba2-2.7b (d_inner 5120, ngroups 1, "
                   "rms_norm eps 1e-5) and mistralai/Mamba-Codestral-7B-v0.1 (d_inner 8192, "
                   "n_groups 8 -> groups of 1024)",
    "precision": "bf16",
    "description": "x, z (tokens, D): g = x * silu(z) in fp32; y = g / sqrt(mean over each group "
                   "of "
                   "g^2 + eps) * w, cast to bf16.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "d_inner": 64, "groups": 1}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "d_inner": 48, "groups": 4}, "cpu": True,
         "visible": False},
        {"name": "decode_b64_2p7b", "params": {"tokens": 64, "d_inner": 5120, "groups": 1}},
        {"name": "prefill_8k_2p7b", "params": {"tokens": 8192, "d_inner": 5120, "groups": 1}},
        {"name": "prefill_4k_codestral", "params": {"tokens": 4096, "d_inner": 8192,
                                                    "groups": 8}, "visible": False},
    ],
    "flops": lambda p: 10 * p["tokens"] * p["d_inner"],
    "bytes": lambda p: 2 * (3 * p["tokens"] * p["d_inner"] + p["d_inner"]),
}


class Model(nn.Module):
    def __init__(self, d_inner: int = 5120, groups: int = 1, eps: float = 1e-5,
                 dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter((1 + 0.1 * torch.randn(d_inner)).to(dtype))
        self.groups, self.eps = groups, eps

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        g = x.float() * F.silu(z.float())
        gg = g.view(*g.shape[:-1], self.groups, -1)
        gg = gg * torch.rsqrt(gg.pow(2).mean(-1, keepdim=True) + self.eps)
        return (gg.view_as(g) * self.weight.float()).to(x.dtype)


def get_inputs(tokens: int = 64, d_inner: int = 5120, dtype=torch.bfloat16):
    return [gen.randn(tokens, d_inner, dtype=dtype), gen.randn(tokens, d_inner, dtype=dtype)]


def get_init_inputs(d_inner: int = 5120, groups: int = 1, dtype=torch.bfloat16):
    return [d_inner, groups, 1e-5, dtype]
