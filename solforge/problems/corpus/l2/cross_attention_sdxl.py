"""SDXL UNet cross-attention (diffusers Attention as attn2 of a BasicTransformerBlock): latent
tokens query the 77-token text context of the two CLIP encoders (2048 features); q, k, v
projections without bias, 64-dim heads, output projection with bias; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "cross_attention_sdxl",
    "category": "L2",
    "models": ["SDXL base 1.0"],
    "family": "SDXL",
    "shapes_from": "unet/config.json of stabilityai/stable-diffusion-xl-base-1.0: "
                   "block_out_channels [320, 640, 1280], attention_head_dim [5, 10, 20] (64-dim "
                   "heads), cross_attention_dim 2048; 1024px -> 128x128 latents, attention at "
                   "64x64 (640 ch) and 32x32 (1280 ch), batch 2 for classifier-free guidance",
    "precision": "fp16",
    "description": "x (b, n, C), ctx (b, 77, 2048): o = to_out(sdpa(to_q(x), to_k(ctx), "
                   "to_v(ctx))) "
                   "with C / 64 heads.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "tokens": 16, "dim": 32, "ctx_len": 7,
                                         "ctx_dim": 24}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "tokens": 9, "dim": 64, "ctx_len": 5,
                                       "ctx_dim": 40}, "cpu": True, "visible": False},
        {"name": "down1_64x64_b2", "params": {"batch": 2, "tokens": 4096, "dim": 640,
                                              "ctx_len": 77, "ctx_dim": 2048}},
        {"name": "mid_32x32_b2", "params": {"batch": 2, "tokens": 1024, "dim": 1280,
                                            "ctx_len": 77, "ctx_dim": 2048}},
        {"name": "down1_64x64_b8", "params": {"batch": 8, "tokens": 4096, "dim": 640,
                                              "ctx_len": 77, "ctx_dim": 2048}, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * (2 * p["tokens"] * p["dim"] ** 2
                                         + 2 * p["ctx_len"] * p["ctx_dim"] * p["dim"]
                                         + 2 * p["tokens"] * p["ctx_len"] * p["dim"]),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["tokens"] * p["dim"]
                            + p["batch"] * p["ctx_len"] * p["ctx_dim"]
                            + 2 * p["dim"] ** 2 + 2 * p["ctx_dim"] * p["dim"]),
}


class Model(nn.Module):
    def __init__(self, dim: int = 640, ctx_dim: int = 2048, head_dim: int = 64,
                 dtype=torch.float16):
        super().__init__()
        self.heads = max(dim // head_dim, 1)
        self.to_q = nn.Linear(dim, dim, bias=False, dtype=dtype)
        self.to_k = nn.Linear(ctx_dim, dim, bias=False, dtype=dtype)
        self.to_v = nn.Linear(ctx_dim, dim, bias=False, dtype=dtype)
        self.to_out = nn.Linear(dim, dim, dtype=dtype)
        for lin in (self.to_q, self.to_k, self.to_v, self.to_out):
            nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        h = self.heads

        def split(t):
            return t.view(b, -1, h, c // h).transpose(1, 2)
        o = F.scaled_dot_product_attention(split(self.to_q(x)), split(self.to_k(ctx)),
                                           split(self.to_v(ctx)))
        return self.to_out(o.transpose(1, 2).reshape(b, n, c))


def get_inputs(batch: int = 2, tokens: int = 4096, dim: int = 640, ctx_len: int = 77,
               ctx_dim: int = 2048, dtype=torch.float16):
    return [gen.randn(batch, tokens, dim, dtype=dtype),
            gen.randn(batch, ctx_len, ctx_dim, dtype=dtype)]


def get_init_inputs(dim: int = 640, ctx_dim: int = 2048, dtype=torch.float16):
    return [dim, ctx_dim, 64, dtype]
