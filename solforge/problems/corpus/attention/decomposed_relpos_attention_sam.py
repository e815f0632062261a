"""SAM image-encoder attention with decomposed relative positions (HF SamVisionAttention,
segment-anything's add_decomposed_rel_pos): for a (H, W) grid of patches, the scores get
q . R_h[h_q - h_k] + q . R_w[w_q - w_k] from two learned tables of (2 * size - 1, head_dim);
14x14 windows in most blocks, the full 64x64 grid in the global ones; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "decomposed_relpos_attention_sam",
    "category": "attention",
    "models": ["SAM ViT-B", "SAM ViT-H"],
    "family": "SAM",
    "shapes_from": "config.json of facebook/sam-vit-base (vision_config: hidden 768, 12 heads, "
                   "window_size 14, 1024px image / patch 16 = 64x64 grid, global blocks [2, 5, 8, "
                   "11]) and sam-vit-huge (1280, 16 heads)",
    "precision": "fp16",
    "description": "q, k, v (batch * heads, H * W, d): attn = softmax(q k^T / sqrt(d) + rel_h + "
                   "rel_w), rel_h[i, j] = q_i . Rh[hq - hk + size - 1] (and rel_w for columns); "
                   "out = attn v.",
    "workloads": [
        {"name": "cpu_small", "params": {"bh": 2, "size": 4, "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"bh": 3, "size": 5, "head_dim": 8}, "cpu": True,
         "visible": False},
        # 1024px image: 64x64 padded to 70x70 = 25 windows of 14x14, 12 heads
        {"name": "window_b1_base", "params": {"bh": 25 * 12, "size": 14, "head_dim": 64}},
        {"name": "global_b1_base", "params": {"bh": 12, "size": 64, "head_dim": 64}},
        {"name": "global_b4_huge", "params": {"bh": 4 * 16, "size": 64, "head_dim": 80},
         "visible": False},
    ],
    "flops": lambda p: p["bh"] * (4 * p["size"] ** 4 * p["head_dim"]
                                  + 4 * p["size"] ** 3 * p["head_dim"]),
    "bytes": lambda p: 2 * (4 * p["bh"] * p["size"] ** 2 * p["head_dim"]
                            + 2 * (2 * p["size"] - 1) * p["head_dim"]),
}


class Model(nn.Module):
    def __init__(self, size: int = 64, head_dim: int = 64, dtype=torch.float16):
        super().__init__()
        self.size, self.scale = size, head_dim ** -0.5
        self.rel_pos_h = nn.Parameter((0.5 * torch.randn(2 * size - 1, head_dim)).to(dtype))
        self.rel_pos_w = nn.Parameter((0.5 * torch.randn(2 * size - 1, head_dim)).to(dtype))
        c = torch.arange(size)
        self.register_buffer("rel_idx", c[:, None] - c[None, :] + size - 1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        bh, n, d = q.shape
        s = self.size
        attn = torch.matmul(q * self.scale, k.transpose(-2, -1))
        rh, rw = self.rel_pos_h[self.rel_idx], self.rel_pos_w[self.rel_idx]  # (s, s, d)
        r_q = q.view(bh, s, s, d)
        rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, rh)
        rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, rw)
        attn = attn.view(bh, s, s, s, s) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
        attn = torch.softmax(attn.view(bh, n, n).float(), dim=-1).to(q.dtype)
        return torch.matmul(attn, v)


def get_inputs(bh: int = 12, size: int = 64, head_dim: int = 64, dtype=torch.float16):
    n = size * size
    return [gen.randn(bh, n, head_dim, dtype=dtype, scale=1.5),
            gen.randn(bh, n, head_dim, dtype=dtype, scale=1.5),
            gen.randn(bh, n, head_dim, dtype=dtype)]


def get_init_inputs(size: int = 64, head_dim: int = 64, dtype=torch.float16):
    return [size, head_dim, dtype]
