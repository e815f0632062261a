"""RetNet's retention in its parallel form (torchscale MultiScaleRetention, parallel branch):
(q k^T / sqrt(dk)) masked by the causal decay D[n, m] = gamma_h^(n - m), D normalized per
row by sqrt of its sum and the product by its absolute row sum (at least 1), times v; head
h decays with gamma_h = 1 - 2^(-5 - h). The xPos rotation of q and k and the group norm after
are not included; fp16 inputs, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "retention_parallel_retnet",
    "category": "attention",
    "models": ["RetNet 1.3B", "RetNet 2.7B", "RetNet 6.7B"],
    "family": "RetNet",
    "shapes_from": "torchscale retnet_1_3b (decoder_embed_dim 2048, retention_heads 8, "
                   "decoder_value_embed_dim 4096 -> key dim 256, value dim 512 per head), "
                   "retnet_2_7b (2560, 10 heads) and retnet_6_7b (4096, 16 heads)",
    "precision": "fp16",
    "description": "q, k (batch, heads, seq, dk), v (batch, heads, seq, dv): "
                   "o = norm1((q k^T dk^-0.5) * norm0(D)) v, per head decay gamma_h.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "heads": 2, "seq": 16, "dk": 16, "dv": 32},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "heads": 3, "seq": 9, "dk": 8, "dv": 16},
         "cpu": True, "visible": False},
        {"name": "prefill_b1_s2048_1p3b", "params": {"batch": 1, "heads": 8, "seq": 2048,
                                                     "dk": 256, "dv": 512}},
        {"name": "prefill_b4_s1024_1p3b", "params": {"batch": 4, "heads": 8, "seq": 1024,
                                                     "dk": 256, "dv": 512}},
        {"name": "prefill_b1_s2048_6p7b", "params": {"batch": 1, "heads": 16, "seq": 2048,
                                                     "dk": 256, "dv": 512}, "visible": False},
    ],
    # the causal half of q k^T and of the product with v
    "flops": lambda p: p["batch"] * p["heads"] * p["seq"] * p["seq"] * (p["dk"] + p["dv"]),
    "bytes": lambda p: 2 * p["batch"] * p["heads"] * p["seq"] * (2 * p["dk"] + 2 * p["dv"]),
}


class Model(nn.Module):
    def __init__(self, heads: int = 8):
        super().__init__()
        self.register_buffer("decay", torch.log(1 - 2.0 ** (-5 - torch.arange(heads).float())))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s, dk = q.shape[2], q.shape[3]
        idx = torch.arange(s, device=q.device).float()
        dist = idx[:, None] - idx[None, :]
        mask = torch.exp(self.decay[:, None, None] * dist).masked_fill(dist < 0, 0.0)
        mask = mask / mask.sum(-1, keepdim=True).sqrt()
        qk = torch.matmul(q.float(), k.float().transpose(-1, -2)) * dk ** -0.5 * mask
        qk = qk / qk.abs().sum(-1, keepdim=True).clamp(min=1.0)
        return torch.matmul(qk, v.float()).to(q.dtype)


def get_inputs(batch: int = 1, heads: int = 8, seq: int = 2048, dk: int = 256, dv: int = 512,
               dtype=torch.float16):
    return [gen.randn(batch, heads, seq, dk, dtype=dtype),
            gen.randn(batch, heads, seq, dk, dtype=dtype),
            gen.randn(batch, heads, seq, dv, dtype=dtype)]


def get_init_inputs(heads: int = 8):
    return [heads]
