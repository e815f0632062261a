"""Causal depthwise conv1d + SiLU of a Mamba block (HF MambaMixer slow path), bf16:
Conv1d(d_inner, d_inner, kernel 4, groups=d_inner, padding 3), keep the first L outputs."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "causal_conv1d_silu_mamba",
    "category": "L2",
    "models": ["Mamba 2.8B", "Falcon Mamba 7B", "Mamba 130M"],
    "family": "Mamba",
    "shapes_from": "config.json of state-spaces/mamba-2.8b (d_model 2560, expand 2 -> d_inner "
                   "5120, d_conv 4), mamba-130m and tiiuae/falcon-mamba-7b",
    "precision": "bf16",
    "description": "y[b, c, t] = SiLU(bias[c] + sum_k w[c, k] * x[b, c, t - 3 + k]) with zeros "
                   "before t = 0: Mamba's short causal convolution over the x branch of "
                   "in_proj, channels-first (batch, d_inner, seq).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "d_inner": 24, "seq": 17}, "cpu": True},
        {"name": "cpu_single_token", "params": {"batch": 3, "d_inner": 37, "seq": 1},
         "cpu": True, "visible": False},
        {"name": "cpu_odd", "params": {"batch": 1, "d_inner": 50, "seq": 29}, "cpu": True,
         "visible": False},
        {"name": "prefill_b1_s4096_mamba2p8b", "params": {"batch": 1, "d_inner": 5120,
                                                     "seq": 4096}},
        {"name": "prefill_b64_s128_mamba2p8b", "params": {"batch": 64, "d_inner": 5120,
                                                     "seq": 128}},
        {"name": "prefill_b4_s2048_falcon_mamba7b", "params": {"batch": 4, "d_inner": 8192,
                                                         "seq": 2048}, "visible": False},
        {"name": "prefill_b16_s1024_mamba130m", "params": {"batch": 16, "d_inner": 1536,
                                                      "seq": 1024}, "visible": False},
    ],
    # 4 multiply-adds, the bias, SiLU (about 4) per output element
    "flops": lambda p: 13 * p["batch"] * p["d_inner"] * p["seq"],
    # x in, y out, weights (4 per channel) and bias (bf16)
    "bytes": lambda p: 2 * (2 * p["batch"] * p["d_inner"] * p["seq"] + 5 * p["d_inner"]),
}


class Model(nn.Module):
    def __init__(self, d_inner: int = 5120, d_conv: int = 4, dtype=torch.bfloat16):
        super().__init__()
        self.conv1d = nn.Conv1d(d_inner, d_inner, kernel_size=d_conv, groups=d_inner,
                                padding=d_conv - 1, bias=True, dtype=dtype)
        self.act = nn.SiLU()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        seq_len = hidden_states.shape[-1]
        return self.act(self.conv1d(hidden_states)[..., :seq_len])


def get_inputs(batch: int = 1, d_inner: int = 5120, seq: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(batch, d_inner, seq, dtype=dtype)]


def get_init_inputs(d_inner: int = 5120, dtype=torch.bfloat16):
    return [d_inner, 4, dtype]
