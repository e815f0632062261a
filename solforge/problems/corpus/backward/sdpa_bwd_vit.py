"""Bidirectional attention backward inside ViT (ViT-L/16: 16 heads of 64; ViT-B/16: 12), 197
tokens per image: dq, dk, dv from the saved output and logsumexp; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "sdpa_bwd_vit",
    "category": "attention",
    "direction": "backward",
    "family": "ViT",
    "models": ["ViT-L/16", "ViT-B/16"],
    "shapes_from": "google/vit-large-patch16-224 config.json: num_attention_heads 16, "
                   "hidden_size 1024 (head_dim 64), 224 px / patch 16 = 196 patches + class "
                   "token = 197; vit-base: 12 heads of 64",
    "precision": "bf16_grad",
    "description": "Bidirectional multi-head attention backward over 197 tokens (no mask; a "
                   "length that is no multiple of a tile): inputs (batch, heads, 197, 64) "
                   "grad_out, q, k, v, the saved o and fp32 lse; returns dq, dk, dv.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 13, "heads": 2, "kv_heads": 2,
                                         "head_dim": 16}, "cpu": True},
        {"name": "train_b64_large", "params": {"batch": 64, "seq": 197, "heads": 16,
                                               "kv_heads": 16, "head_dim": 64}},
        {"name": "train_b128_base", "params": {"batch": 128, "seq": 197, "heads": 12,
                                               "kv_heads": 12, "head_dim": 64}},
        {"name": "train_b256_large", "params": {"batch": 256, "seq": 197, "heads": 16,
                                                "kv_heads": 16, "head_dim": 64},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 3, "seq": 10, "heads": 4, "kv_heads": 4,
                                       "head_dim": 32}, "cpu": True, "visible": False},
    ],
    # five S x S x d matmuls (recomputed QK^T, dP, dV, dQ, dK), no mask
    "flops": lambda p: 10 * p["batch"] * p["heads"] * p["seq"] ** 2 * p["head_dim"],
    "bytes": lambda p: 8 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"])
    + 4 * p["batch"] * p["heads"] * p["seq"],
}

def _scores(q, k, scale):
    return q @ k.transpose(-1, -2) * scale  # bidirectional: every token sees every token


class Model(nn.Module):
    def __init__(self, heads: int = 16, kv_heads: int = 16, head_dim: int = 64):
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


def get_inputs(batch: int = 64, seq: int = 197, heads: int = 16, kv_heads: int = 16,
               head_dim: int = 64, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    o, lse = _forward(q, k, v, heads // kv_heads, head_dim ** -0.5)
    return [gen.randn(batch, heads, seq, head_dim, dtype=dtype), q, k, v, o, lse]


def get_init_inputs(heads: int = 16, kv_heads: int = 16, head_dim: int = 64):
    return [heads, kv_heads, head_dim]
