"""Causal grouped-query attention backward at Qwen2.5's head counts (7B: 28 query heads over 4
k/v heads; 0.5B: 14 over 2; head_dim 128 and 64): groups of 7, head counts that are not powers
of two; dq, dk, dv from the saved output and logsumexp; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "sdpa_bwd_gqa_qwen2_5",
    "category": "attention",
    "direction": "backward",
    "family": "Qwen2.5",
    "models": ["Qwen2.5 7B", "Qwen2.5 0.5B"],
    "shapes_from": "Qwen/Qwen2.5-7B config.json: num_attention_heads 28, num_key_value_heads "
                   "4, hidden_size 3584 (head_dim 128); Qwen2.5-0.5B: 14, 2, 896 (head_dim 64); "
                   "sequences 2048-8192",
    "precision": "bf16_grad",
    "description": "o = softmax(q k^T / sqrt(d) + causal) v with k/v heads shared by groups of "
                   "7 query heads. Inputs (batch, heads, seq, d): grad_out, q, k, v, the saved "
                   "o, and the saved fp32 lse = logsumexp of the scaled, masked scores. Returns "
                   "dq = dS k / sqrt(d), dk = dS^T q / sqrt(d) and dv = P^T grad_out, summed "
                   "over each k/v head's query group, where P = exp(S - lse) and dS = P * "
                   "(grad_out v^T - rowsum(grad_out * o)).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 15, "heads": 7, "kv_heads": 1,
                                         "head_dim": 16}, "cpu": True},
        {"name": "train_b4_s4096_7b", "params": {"batch": 4, "seq": 4096, "heads": 28,
                                                 "kv_heads": 4, "head_dim": 128}},
        {"name": "train_b16_s2048_0_5b", "params": {"batch": 16, "seq": 2048, "heads": 14,
                                                    "kv_heads": 2, "head_dim": 64}},
        {"name": "train_b1_s8192_7b", "params": {"batch": 1, "seq": 8192, "heads": 28,
                                                 "kv_heads": 4, "head_dim": 128},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 21, "heads": 14, "kv_heads": 2,
                                       "head_dim": 32}, "cpu": True, "visible": False},
    ],
    # five S x S x d matmuls (recomputed QK^T, dP, dV, dQ, dK) over the causal half
    "flops": lambda p: 5 * p["batch"] * p["heads"] * p["seq"] * (p["seq"] + 1) * p["head_dim"],
    # q, o, grad_out, dq (heads) and k, v, dk, dv (kv heads) in bf16; lse in fp32
    "bytes": lambda p: 8 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"])
    + 4 * p["batch"] * p["heads"] * p["seq"],
}


def _scores(q, k, scale):
    s = q @ k.transpose(-1, -2) * scale
    n = s.shape[-1]
    allowed = torch.ones(n, n, dtype=torch.bool, device=s.device).tril()
    return s.masked_fill(~allowed, float("-inf"))


class Model(nn.Module):
    def __init__(self, heads: int = 28, kv_heads: int = 4, head_dim: int = 128):
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


def get_inputs(batch: int = 4, seq: int = 4096, heads: int = 28, kv_heads: int = 4,
               head_dim: int = 128, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    o, lse = _forward(q, k, v, heads // kv_heads, head_dim ** -0.5)
    return [gen.randn(batch, heads, seq, head_dim, dtype=dtype), q, k, v, o, lse]


def get_init_inputs(heads: int = 28, kv_heads: int = 4, head_dim: int = 128):
    return [heads, kv_heads, head_dim]
