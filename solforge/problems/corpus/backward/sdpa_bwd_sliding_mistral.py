"""Sliding-window causal attention backward as Mistral 7B v0.1 trains it (window 4096, 32
query heads over 8 k/v heads of 128): dq, dk, dv from the saved output and logsumexp; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "sdpa_bwd_sliding_mistral",
    "category": "attention",
    "direction": "backward",
    "family": "Mistral",
    "models": ["Mistral 7B v0.1"],
    "shapes_from": "mistralai/Mistral-7B-v0.1 config.json: num_attention_heads 32, "
                   "num_key_value_heads 8, hidden_size 4096 (head_dim 128), sliding_window "
                   "4096; sequences 8192 (two windows) and 4096",
    "precision": "bf16_grad",
    "description": "Sliding-window causal GQA backward: query i sees keys i-window+1 .. i. "
                   "Inputs (batch, heads, seq, 128) grad_out, q, k, v, the saved o and fp32 "
                   "lse; returns dq, dk, dv. A kernel that treats it as plain causal attention "
                   "fails once seq exceeds the window.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 19, "heads": 4, "kv_heads": 1,
                                         "head_dim": 16, "window": 6}, "cpu": True},
        {"name": "train_b2_s8192", "params": {"batch": 2, "seq": 8192, "heads": 32,
                                              "kv_heads": 8, "head_dim": 128, "window": 4096}},
        {"name": "train_b4_s4096", "params": {"batch": 4, "seq": 4096, "heads": 32,
                                              "kv_heads": 8, "head_dim": 128, "window": 4096}},
        {"name": "train_b1_s16384", "params": {"batch": 1, "seq": 16384, "heads": 32,
                                               "kv_heads": 8, "head_dim": 128, "window": 4096},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 25, "heads": 4, "kv_heads": 2,
                                       "head_dim": 32, "window": 7}, "cpu": True,
         "visible": False},
    ],
    # five S x S x d matmuls over the band of window keys per query
    "flops": lambda p: 10 * p["batch"] * p["heads"] * p["head_dim"] * sum(
        min(i + 1, p["window"]) for i in range(p["seq"])),
    "bytes": lambda p: 8 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"])
    + 4 * p["batch"] * p["heads"] * p["seq"],
}

def _scores(q, k, scale, window):
    s = q @ k.transpose(-1, -2) * scale
    allowed = gen.sliding_window_mask(s.shape[-1], window, device=s.device)
    return s.masked_fill(~allowed, float("-inf"))


class Model(nn.Module):
    def __init__(self, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                 window: int = 4096):
        super().__init__()
        self.rep, self.scale, self.window = heads // kv_heads, head_dim ** -0.5, window

    def forward(self, grad_out, q, k, v, o, lse):
        dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.empty(k.shape, dtype=torch.float32, device=k.device)
        dv = torch.empty(v.shape, dtype=torch.float32, device=v.device)
        for j in range(k.shape[1]):  # one k/v head and its query group at a time (memory)
            hs = slice(j * self.rep, (j + 1) * self.rep)
            qj, kj, vj = q[:, hs].float(), k[:, j:j + 1].float(), v[:, j:j + 1].float()
            do = grad_out[:, hs].float()
            p = torch.exp(_scores(qj, kj, self.scale, self.window) - lse[:, hs, :, None])
            dv[:, j] = (p.transpose(-1, -2) @ do).sum(1)
            delta = (do * o[:, hs].float()).sum(-1, keepdim=True)
            ds = p * (do @ vj.transpose(-1, -2) - delta)
            dq[:, hs] = ds @ kj * self.scale
            dk[:, j] = (ds.transpose(-1, -2) @ qj).sum(1) * self.scale
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def autograd_forward(model, grad_out, q, k, v, o, lse):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(q, k, v):
        kk = k.repeat_interleave(model.rep, dim=1)
        vv = v.repeat_interleave(model.rep, dim=1)
        return torch.softmax(_scores(q, kk, model.scale, model.window), dim=-1) @ vv
    return fn, [q, k, v], [grad_out]


def _forward(q, k, v, rep, scale, window):
    """o and lse as the forward saves them (fp32 math, o in the input dtype)."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    for j in range(k.shape[1]):
        hs = slice(j * rep, (j + 1) * rep)
        s = _scores(q[:, hs].float(), k[:, j:j + 1].float(), scale, window)
        lse[:, hs] = torch.logsumexp(s, dim=-1)
        o[:, hs] = (torch.softmax(s, dim=-1) @ v[:, j:j + 1].float()).to(q.dtype)
    return o, lse


def get_inputs(batch: int = 2, seq: int = 8192, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, window: int = 4096, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    o, lse = _forward(q, k, v, heads // kv_heads, head_dim ** -0.5, window)
    return [gen.randn(batch, heads, seq, head_dim, dtype=dtype), q, k, v, o, lse]


def get_init_inputs(heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                    window: int = 4096):
    return [heads, kv_heads, head_dim, window]
