"""Causal attention backward with Gemma 2's logit soft-capping (cap 50; 9B: 16 query heads over 8
k/v heads of 256, scale 1/sqrt(256)): dq, dk, dv through the tanh cap; bf16, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "sdpa_bwd_softcap_gemma2",
    "category": "attention",
    "direction": "backward",
    "family": "Gemma 2",
    "models": ["Gemma 2 9B", "Gemma 2 2B"],
    "shapes_from": "google/gemma-2-9b config.json: num_attention_heads 16, "
                   "num_key_value_heads 8, head_dim 256, query_pre_attn_scalar 256, "
                   "attn_logit_softcapping 50.0; gemma-2-2b: 8 and 4 heads; context 8192",
    "precision": "bf16_grad",
    "description": "Causal GQA backward with Gemma 2's logit soft-capping: S = cap * tanh(q k^T "
                   "/ sqrt(256) / cap), cap 50. Inputs (batch, heads, seq, 256) grad_out, q, "
                   "k, v, the saved o and fp32 lse of the capped scores; returns dq, dk, dv, "
                   "where the score gradient passes through the cap: dS_raw = dS * (1 - "
                   "tanh^2).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 14, "heads": 4, "kv_heads": 2,
                                         "head_dim": 32}, "cpu": True},
        {"name": "train_b2_s4096_9b", "params": {"batch": 2, "seq": 4096, "heads": 16,
                                                 "kv_heads": 8, "head_dim": 256}},
        {"name": "train_b4_s2048_2b", "params": {"batch": 4, "seq": 2048, "heads": 8,
                                                 "kv_heads": 4, "head_dim": 256}},
        {"name": "train_b1_s8192_9b", "params": {"batch": 1, "seq": 8192, "heads": 16,
                                                 "kv_heads": 8, "head_dim": 256},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 19, "heads": 2, "kv_heads": 1,
                                       "head_dim": 64}, "cpu": True, "visible": False},
    ],
    "flops": lambda p: 5 * p["batch"] * p["heads"] * p["seq"] * (p["seq"] + 1) * p["head_dim"],
    "bytes": lambda p: 8 * p["batch"] * p["seq"] * p["head_dim"] * (p["heads"] + p["kv_heads"])
    + 4 * p["batch"] * p["heads"] * p["seq"],
}

CAP = 50.0


def _raw(q, k, scale):
    """tanh(q k^T * scale / cap): the capped scores are CAP times it."""
    return torch.tanh(q @ k.transpose(-1, -2) * (scale / CAP))


def _scores(q, k, scale, t=None):
    s = CAP * (_raw(q, k, scale) if t is None else t)
    n = s.shape[-1]
    allowed = torch.ones(n, n, dtype=torch.bool, device=s.device).tril()
    return s.masked_fill(~allowed, float("-inf"))


class Model(nn.Module):
    def __init__(self, heads: int = 16, kv_heads: int = 8, head_dim: int = 256):
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
            t = _raw(qj, kj, self.scale)
            p = torch.exp(_scores(qj, kj, self.scale, t) - lse[:, hs, :, None])
            dv[:, j] = (p.transpose(-1, -2) @ do).sum(1)
            delta = (do * o[:, hs].float()).sum(-1, keepdim=True)
            ds = p * (do @ vj.transpose(-1, -2) - delta) * (1.0 - t * t)  # through the cap
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


def get_inputs(batch: int = 2, seq: int = 4096, heads: int = 16, kv_heads: int = 8,
               head_dim: int = 256, dtype=torch.bfloat16):
    # scores with a std of about 9 before the cap, so its tails bend it (tanh(27/50) = 0.49);
    # much larger and o's bf16 rounding alone moves dq by 2% (rowsum(grad_out * o))
    q = gen.randn(batch, heads, seq, head_dim, dtype=dtype, scale=3.0)
    k = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype, scale=3.0)
    v = gen.randn(batch, kv_heads, seq, head_dim, dtype=dtype)
    o, lse = _forward(q, k, v, heads // kv_heads, head_dim ** -0.5)
    return [gen.randn(batch, heads, seq, head_dim, dtype=dtype), q, k, v, o, lse]


def get_init_inputs(heads: int = 16, kv_heads: int = 8, head_dim: int = 256):
    return [heads, kv_heads, head_dim]
