"""Causal grouped-query attention backward as Llama 3 trains it (32 query heads sharing 8 k/v
heads, head_dim 128): dq, dk, dv from the upstream gradient and the saved output and
logsumexp, as FlashAttention's backward takes them; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "sdpa_bwd_causal_llama3",
    "category": "attention",
    "direction": "backward",
    "family": "Llama 3",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "shapes_from": "meta-llama/Meta-Llama-3-8B config.json: num_attention_heads 32, "
                   "num_key_value_heads 8, hidden_size 4096 (head_dim 128); 70B at tensor "
                   "parallelism 8: 8 and 1 heads per GPU; sequences 2048-8192",
    "precision": "bf16_grad",
    "description": "o = softmax(q k^T / sqrt(d) + causal) v with k/v heads shared by groups of "
                   "4 query heads. Inputs (batch, heads, seq, d): grad_out, q, k, v, the saved "
                   "o, and the saved fp32 lse = logsumexp of the scaled, masked scores. Returns "
                   "dq = dS k / sqrt(d), dk = dS^T q / sqrt(d) and dv = P^T grad_out, summed "
                   "over each k/v head's query group, where P = exp(S - lse) and dS = P * "
                   "(grad_out v^T - rowsum(grad_out * o)).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 17, "heads": 4, "kv_heads": 2,
                                         "head_dim": 16}, "cpu": True},
        {"name": "train_b8_s2048_8b", "params": {"batch": 8, "seq": 2048, "heads": 32,
                                                 "kv_heads": 8, "head_dim": 128}},
        {"name": "train_b2_s8192_8b", "params": {"batch": 2, "seq": 8192, "heads": 32,
                                                 "kv_heads": 8, "head_dim": 128}},
        {"name": "train_b2_s8192_70b_tp8", "params": {"batch": 2, "seq": 8192, "heads": 8,
                                                      "kv_heads": 1, "head_dim": 128},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 23, "heads": 6, "kv_heads": 2,
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
    def __init__(self, heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
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


def get_inputs(batch: int = 2, seq: int = 8192, heads: int = 32, kv_heads: int = 8,
               head_dim: int = 128, dtype=torch.bfloat16):
    # q and k scaled so the scores have a std of about 2.2: attention neither flat nor one-hot
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    o, lse = _forward(q, k, v, heads // kv_heads, head_dim ** -0.5)
    return [gen.randn(batch, heads, seq, head_dim, dtype=dtype), q, k, v, o, lse]


def get_init_inputs(heads: int = 32, kv_heads: int = 8, head_dim: int = 128):
    return [heads, kv_heads, head_dim]
