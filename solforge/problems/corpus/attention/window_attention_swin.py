"""Swin Transformer window attention (HF SwinSelfAttention on a non-shifted block): the
feature map is cut into 7x7 windows, each window runs multi-head self-attention with a qkv
projection (bias) and a learned relative position bias indexed by the (dy, dx) offset of
the two patches, then the output projection; windows are put back in place; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "window_attention_swin",
    "category": "attention",
    "models": ["Swin-T", "Swin-B", "Swin-L"],
    "family": "Swin",
    "shapes_from": "config.json of microsoft/swin-tiny-patch4-window7-224 (embed_dim 96, "
                   "num_heads [3, 6, 12, 24], window_size 7, 56x56 stage-1 map), "
                   "swin-base-patch4-window7-224 (128, heads 4..32) and swin-large (192)",
    "precision": "fp16",
    "description": "x (batch, H, W, C) -> windows (batch * H/7 * W/7, 49, C) -> qkv -> softmax(q "
                   "k^T "
                   "/ sqrt(d) + B[rel(i, j)]) v per head -> proj -> (batch, H, W, C).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "size": 8, "dim": 16, "heads": 2,
                                         "window": 4}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "size": 6, "dim": 12, "heads": 3,
                                       "window": 3}, "cpu": True, "visible": False},
        {"name": "stage1_b32_tiny", "params": {"batch": 32, "size": 56, "dim": 96, "heads": 3,
                                               "window": 7}},
        {"name": "stage3_b32_tiny", "params": {"batch": 32, "size": 14, "dim": 384, "heads": 12,
                                               "window": 7}},
        {"name": "stage1_b16_base", "params": {"batch": 16, "size": 56, "dim": 128, "heads": 4,
                                               "window": 7}, "visible": False},
        {"name": "stage2_b64_large", "params": {"batch": 64, "size": 28, "dim": 384,
                                                "heads": 12, "window": 7}, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["size"] ** 2 * (4 * p["dim"] ** 2
                                                          + 2 * p["window"] ** 2 * p["dim"]),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["size"] ** 2 * p["dim"] + 4 * p["dim"] ** 2),
}


class Model(nn.Module):
    def __init__(self, dim: int = 96, heads: int = 3, window: int = 7, dtype=torch.float16):
        super().__init__()
        self.heads, self.window, self.scale = heads, window, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, dtype=dtype)
        self.proj = nn.Linear(dim, dim, dtype=dtype)
        for lin in (self.qkv, self.proj):
            nn.init.normal_(lin.weight, std=dim ** -0.5)
        self.bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads, dtype=dtype))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                            indexing="ij")).flatten(1)  # (2, w*w)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("rel_index", rel[..., 0] * (2 * window - 1) + rel[..., 1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, hgt, wid, c = x.shape
        w, h = self.window, self.heads
        win = x.view(b, hgt // w, w, wid // w, w, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, w * w, c)
        qkv = self.qkv(win).view(win.shape[0], w * w, 3, h, c // h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.matmul(q * self.scale, k.transpose(-1, -2))
        bias = self.bias_table[self.rel_index.view(-1)].view(w * w, w * w, h).permute(2, 0, 1)
        attn = torch.softmax(attn + bias[None], dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(-1, w * w, c)
        out = self.proj(out).view(b, hgt // w, wid // w, w, w, c).permute(0, 1, 3, 2, 4, 5)
        return out.reshape(b, hgt, wid, c)


def get_inputs(batch: int = 32, size: int = 56, dim: int = 96, dtype=torch.float16):
    return [gen.randn(batch, size, size, dim, dtype=dtype)]


def get_init_inputs(dim: int = 96, heads: int = 3, window: int = 7, dtype=torch.float16):
    return [dim, heads, window, dtype]
