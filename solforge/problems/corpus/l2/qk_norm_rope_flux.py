"""FLUX.1's attention inputs (diffusers FluxAttnProcessor2_0 / BFL's QKNorm + apply_rope):
per-head RMSNorm of q and k (eps 1e-6, learned scale), then the 3-axis rotary embedding
whose (cos, sin) per token and frequency come precomputed from the image/text position ids,
applied to interleaved pairs as a 2x2 rotation; bf16 in, rotation in fp32."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "qk_norm_rope_flux",
    "category": "L2",
    "models": ["FLUX.1-dev", "FLUX.1-schnell"],
    "family": "Flux",
    "shapes_from": "transformer/config.json of black-forest-labs/FLUX.1-dev: num_attention_heads "
                   "24, attention_head_dim 128, axes_dims_rope [16, 56, 56]; 1024px -> 4096 "
                   "image tokens + 512 text tokens, 512px -> 1024 + 512",
    "precision": "bf16",
    "description": "q, k (b, 24, n, 128): x = RMSNorm(x) * scale (fp32, cast to bf16), then pairs "
                   "(x0, x1) -> (cos x0 - sin x1, sin x0 + cos x1) with cos, sin (n, 64) inputs.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "heads": 2, "tokens": 12, "head_dim": 16},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "heads": 3, "tokens": 5, "head_dim": 8},
         "cpu": True, "visible": False},
        {"name": "dev_1024px_b1", "params": {"batch": 1, "heads": 24, "tokens": 4608,
                                             "head_dim": 128}},
        {"name": "dev_512px_b4", "params": {"batch": 4, "heads": 24, "tokens": 1536,
                                            "head_dim": 128}},
        {"name": "dev_1024px_b2", "params": {"batch": 2, "heads": 24, "tokens": 4608,
                                             "head_dim": 128}, "visible": False},
    ],
    "flops": lambda p: 10 * p["batch"] * p["heads"] * p["tokens"] * p["head_dim"],
    "bytes": lambda p: 2 * 4 * p["batch"] * p["heads"] * p["tokens"] * p["head_dim"]
    + 4 * p["tokens"] * p["head_dim"],
}


class Model(nn.Module):
    def __init__(self, head_dim: int = 128, eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.q_scale = nn.Parameter((1 + 0.1 * torch.randn(head_dim)).to(dtype))
        self.k_scale = nn.Parameter((1 + 0.1 * torch.randn(head_dim)).to(dtype))
        self.eps = eps

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * w

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        xf = x.float().unflatten(-1, (-1, 2))
        x0, x1 = xf[..., 0], xf[..., 1]
        out = torch.stack((cos * x0 - sin * x1, sin * x0 + cos * x1), dim=-1)
        return out.flatten(-2).to(x.dtype)

    def forward(self, q, k, cos, sin):
        q, k = self._rms(q, self.q_scale), self._rms(k, self.k_scale)
        return self._rope(q, cos, sin), self._rope(k, cos, sin)


def get_inputs(batch: int = 1, heads: int = 24, tokens: int = 4608, head_dim: int = 128,
               dtype=torch.bfloat16):
    q = gen.randn(batch, heads, tokens, head_dim, dtype=dtype, scale=2.0)
    k = gen.randn(batch, heads, tokens, head_dim, dtype=dtype, scale=2.0)
    angles = gen.uniform(tokens, head_dim // 2, low=-100.0, high=100.0)
    return [q, k, angles.cos(), angles.sin()]


def get_init_inputs(head_dim: int = 128, dtype=torch.bfloat16):
    return [head_dim, 1e-6, dtype]
