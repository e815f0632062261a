"""RWKV-4's WKV operator (the time-mixing core, HF RwkvLinearAttention's CPU path, the CUDA
kernel's recurrence): per channel, a decaying weighted average of past values with weights
exp(k), decay exp(-exp(time_decay)) per step and a bonus time_first for the current token,
computed in the max-shifted form that stays finite; fp32, from a zero state."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "wkv_time_mix_rwkv4",
    "category": "L2",
    "models": ["RWKV-4 Raven 7B", "RWKV-4 Pile 14B"],
    "family": "RWKV",
    "shapes_from": "config.json of RWKV/rwkv-raven-7b (hidden_size 4096, attention_hidden_size "
                   "4096, context_length 4096) and RWKV/rwkv-4-14b-pile (5120)",
    "precision": "tf32",
    "description": "k, v (b, T, C), time_decay w and time_first u (C,): wkv_t = (sum_{i<t} "
                   "e^{-(t-1-i) e^w + k_i} v_i + e^{u + k_t} v_t) / (same without v); (b, T, C).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 16, "channels": 8}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 9, "channels": 5}, "cpu": True,
         "visible": False},
        {"name": "prefill_b1_s1024_7b", "params": {"batch": 1, "seq": 1024, "channels": 4096}},
        {"name": "prefill_b8_s512_7b", "params": {"batch": 8, "seq": 512, "channels": 4096}},
        {"name": "prefill_b1_s2048_14b", "params": {"batch": 1, "seq": 2048, "channels": 5120},
         "visible": False},
    ],
    # ~12 exp/max/mul/add per channel and step
    "flops": lambda p: 12 * p["batch"] * p["seq"] * p["channels"],
    "bytes": lambda p: 4 * (3 * p["batch"] * p["seq"] * p["channels"] + 2 * p["channels"]),
}


class Model(nn.Module):
    def __init__(self, channels: int = 4096):
        super().__init__()
        # trained decays spread from fast to slow channels; time_first around 0.5
        self.time_decay = nn.Parameter(gen.uniform(channels, low=-6.0, high=1.0))
        self.time_first = nn.Parameter(gen.uniform(channels, low=-1.0, high=1.0))

    def forward(self, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, t, c = k.shape
        w = -torch.exp(self.time_decay)
        u = self.time_first
        aa = torch.zeros(b, c, device=k.device)
        bb = torch.zeros(b, c, device=k.device)
        pp = torch.full((b, c), -1e38, device=k.device)
        out = []
        for i in range(t):
            kk, vv = k[:, i], v[:, i]
            ww = u + kk
            p = torch.maximum(pp, ww)
            e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
            out.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
            ww = pp + w
            p = torch.maximum(ww, kk)
            e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
            aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
        return torch.stack(out, dim=1)


def get_inputs(batch: int = 1, seq: int = 1024, channels: int = 4096):
    return [gen.randn(batch, seq, channels, scale=2.0), gen.randn(batch, seq, channels)]


def get_init_inputs(channels: int = 4096):
    return [channels]
