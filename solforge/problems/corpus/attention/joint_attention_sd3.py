"""Stable Diffusion 3.5's joint (MMDiT) attention (diffusers JointAttnProcessor2_0 with
qk_norm "rms_norm"): image and text streams each RMS-normalize their per-head q and k with
their own weights, the two streams are concatenated along the sequence (image tokens, then
text tokens), attend jointly without a mask, and are split back; bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "joint_attention_sd3",
    "category": "attention",
    "models": ["Stable Diffusion 3.5 Large", "Stable Diffusion 3.5 Medium"],
    "family": "SD3",
    "shapes_from": "transformer/config.json of stabilityai/stable-diffusion-3.5-large "
                   "(num_attention_heads 38, attention_head_dim 64, qk_norm rms_norm) and "
                   "3.5-medium (24 heads); 1024px -> 128x128 latent / patch 2 = 4096 image "
                   "tokens, 333 text tokens (77 CLIP + 256 T5)",
    "precision": "bf16",
    "description": "img q, k, v (b, heads, n_img, 64) and txt q, k, v (b, heads, n_txt, 64): "
                   "q, k RMS-normed per head (eps 1e-6) with per-stream weights; o = "
                   "sdpa(cat(img, txt)); returns (o_img, o_txt).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "heads": 2, "n_img": 16, "n_txt": 5,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "heads": 3, "n_img": 9, "n_txt": 3,
                                       "head_dim": 8}, "cpu": True, "visible": False},
        {"name": "large_1024px_b2", "params": {"batch": 2, "heads": 38, "n_img": 4096,
                                               "n_txt": 333, "head_dim": 64}},
        {"name": "medium_1024px_b2", "params": {"batch": 2, "heads": 24, "n_img": 4096,
                                                "n_txt": 333, "head_dim": 64}},
        {"name": "large_512px_b4", "params": {"batch": 4, "heads": 38, "n_img": 1024,
                                              "n_txt": 333, "head_dim": 64}, "visible": False},
    ],
    "flops": lambda p: 4 * p["batch"] * p["heads"] * (p["n_img"] + p["n_txt"]) ** 2 * p["head_dim"],
    "bytes": lambda p: 2 * 4 * p["batch"] * p["heads"] * (p["n_img"] + p["n_txt"]) * p["head_dim"],
}


class Model(nn.Module):
    def __init__(self, head_dim: int = 64, eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        def weight():
            return nn.Parameter((1 + 0.1 * torch.randn(head_dim)).to(dtype))
        self.norm_q, self.norm_k = weight(), weight()
        self.norm_added_q, self.norm_added_k = weight(), weight()

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * w

    def forward(self, q, k, v, tq, tk, tv):
        q, k = self._rms(q, self.norm_q), self._rms(k, self.norm_k)
        tq, tk = self._rms(tq, self.norm_added_q), self._rms(tk, self.norm_added_k)
        o = F.scaled_dot_product_attention(torch.cat([q, tq], 2), torch.cat([k, tk], 2),
                                           torch.cat([v, tv], 2))
        n_img = q.shape[2]
        return o[:, :, :n_img], o[:, :, n_img:]


def get_inputs(batch: int = 2, heads: int = 38, n_img: int = 4096, n_txt: int = 333,
               head_dim: int = 64, dtype=torch.bfloat16):
    def r(n, scale=1.0):
        return gen.randn(batch, heads, n, head_dim, dtype=dtype, scale=scale)
    return [r(n_img), r(n_img), r(n_img), r(n_txt), r(n_txt), r(n_txt)]


def get_init_inputs(head_dim: int = 64, dtype=torch.bfloat16):
    return [head_dim, 1e-6, dtype]
