"""Whisper's audio-encoder self-attention backward (large-v3: 20 heads of 64 over 1500 frames;
small: 12 heads): bidirectional, dq, dk, dv from the saved output and logsumexp; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "sdpa_bwd_whisper_encoder",
    "category": "attention",
    "direction": "backward",
    "family": "Whisper",
    "models": ["Whisper large-v3", "Whisper small"],
    "shapes_from": "openai/whisper-large-v3 config.json: encoder_attention_heads 20, d_model "
                   "1280 (head_dim 64), max_source_positions 1500 (30 s of audio); "
                   "whisper-small: 12 heads, d_model 768",
    "precision": "bf16_grad",
    "description": "The audio encoder's bidirectional self-attention backward over 1500 frames: "
                   "inputs (batch, heads, 1500, 64) grad_out, q, k, v, the saved o and fp32 "
                   "lse; returns dq, dk, dv.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 30, "heads": 2, "kv_heads": 2,
                                         "head_dim": 16}, "cpu": True},
        {"name": "train_b8_large_v3", "params": {"batch": 8, "seq": 1500, "heads": 20,
                                                 "kv_heads": 20, "head_dim": 64}},
        {"name": "train_b32_small", "params": {"batch": 32, "seq": 1500, "heads": 12,
                                               "kv_heads": 12, "head_dim": 64}},
        {"name": "train_b16_large_v3", "params": {"batch": 16, "seq": 1500, "heads": 20,
                                                  "kv_heads": 20, "head_dim": 64},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 15, "heads": 3, "kv_heads": 3,
                                       "head_dim": 32}, "cpu": True, "visible": False},
    ],
    "flops": lambda p: 10 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"],
    "bytes": lambda p: 8 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"])
    + 4 * p["batch"] * p["heads"] * p["seq"],
}

def _scores(q, k, scale):
    return q @ k.transpose(-1, -2) * scale  # bidirectional: every token sees every token


class Model(nn.Module):
    def __init__(self, heads: int = 20, kv_heads: int = 20, head_dim: int = 64):
        super().__init__()
        self.rep, self.scale = heads // kv_heads, head_dim ** -0.5

    def forward(self, grad_out, q, k, v, o, lse):
        dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.empty(k.shape, dtype=torch.float32, device=k.device)
        dv = torch.empty(v.shape, dtype=torch.float32, device=v.device)
        for j in range(k.shape[1]):  # one k/v head and its query group at a time (memory)
            hs = slice(j * self.rep, (j + 1) * self.rep)
            qj, kj, vj = q[:, hs].float(), k[:, j:j + 1].float(), v[:, j:j + 1].float()
            do = grad_out[:, hs].float()
            p = torch.exp(_scores(qj, kj, self.scale) - lse[:, hs, :, None])
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
        return torch.softmax(_scores(q, kk, model.scale), dim=-1) @ vv
    return fn, [q, k, v], [grad_out]


def _forward(q, k, v, rep, scale):
    """o and lse as the forward saves them (fp32 math, o in the input dtype)."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    for j in range(k.shape[1]):
        hs = slice(j * rep, (j + 1) * rep)
        s = _scores(q[:, hs].float(), k[:, j:j + 1].float(), scale)
        lse[:, hs] = torch.logsumexp(s, dim=-1)
        o[:, hs] = (torch.softmax(s, dim=-1) @ v[:, j:j + 1].float()).to(q.dtype)
    return o, lse


def get_inputs(batch: int = 8, seq: int = 1500, heads: int = 20, kv_heads: int = 20,
               head_dim: int = 64, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    o, lse = _forward(q, k, v, heads // kv_heads, head_dim ** -0.5)
    return [gen.randn(batch, heads, seq, head_dim, dtype=dtype), q, k, v, o, lse]


def get_init_inputs(heads: int = 20, kv_heads: int = 20, head_dim: int = 64):
    return [heads, kv_heads, head_dim]
