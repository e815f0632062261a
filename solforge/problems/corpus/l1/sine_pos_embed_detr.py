"""DETR's 2D sine positional embedding (HF DetrSinePositionEmbedding, normalize=True): the
cumulative sums of the pixel mask along rows and columns give each feature-map position its
(y, x), normalized to [0, 2 pi]; 128 frequencies per axis with temperature 10000, sin on even
and cos on odd channels interleaved; fp32."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "sine_pos_embed_detr",
    "category": "L1",
    "models": ["DETR ResNet-50", "Deformable DETR"],
    "family": "DETR",
    "shapes_from": "config.json of facebook/detr-resnet-50 (d_model 256 -> 128 per axis, "
                   "position_embedding_type sine; backbone stride 32: an 800x1333 image gives a "
                   "25x42 map) and Deformable DETR's stride-8 map (100x167)",
    "precision": "fp32",
    "description": "mask (b, H, W) of valid pixels (1) -> y = cumsum over H, x = cumsum over W, "
                   "each divided by its last value (+1e-6) and times 2 pi; pos[c] = sin/cos(v / "
                   "10000^(2 floor(c/2) / 128)); output (b, 256, H, W) as [pos_y, pos_x].",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "height": 5, "width": 7, "feats": 16},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "height": 3, "width": 4, "feats": 8},
         "cpu": True, "visible": False},
        {"name": "detr_800x1333_b8", "params": {"batch": 8, "height": 25, "width": 42,
                                                "feats": 128}},
        {"name": "deformable_stride8_b4", "params": {"batch": 4, "height": 100, "width": 167,
                                                     "feats": 128}},
        {"name": "detr_800x1333_b32", "params": {"batch": 32, "height": 25, "width": 42,
                                                 "feats": 128}, "visible": False},
    ],
    "flops": lambda p: 2 * 4 * p["batch"] * p["height"] * p["width"] * p["feats"],
    "bytes": lambda p: 4 * p["batch"] * p["height"] * p["width"] * (2 * p["feats"])
    + p["batch"] * p["height"] * p["width"],
}


class Model(nn.Module):
    def __init__(self, feats: int = 128, temperature: float = 10000.0):
        super().__init__()
        dim_t = torch.arange(feats, dtype=torch.float32)
        self.register_buffer("dim_t", temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor")
                                                      / feats))
        self.scale = 2 * math.pi

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        y = mask.cumsum(1, dtype=torch.float32)
        x = mask.cumsum(2, dtype=torch.float32)
        y = y / (y[:, -1:, :] + 1e-6) * self.scale
        x = x / (x[:, :, -1:] + 1e-6) * self.scale
        px, py = x[..., None] / self.dim_t, y[..., None] / self.dim_t
        px = torch.stack((px[..., 0::2].sin(), px[..., 1::2].cos()), dim=4).flatten(3)
        py = torch.stack((py[..., 0::2].sin(), py[..., 1::2].cos()), dim=4).flatten(3)
        return torch.cat((py, px), dim=3).permute(0, 3, 1, 2)


def get_inputs(batch: int = 8, height: int = 25, width: int = 42):
    # images of different sizes padded to one batch: a valid top-left rectangle per image
    hs = gen.lengths(batch, height, max(1, height // 2))
    ws = gen.lengths(batch, width, max(1, width // 2))
    rows = torch.arange(height)[None, :, None] < hs[:, None, None]
    cols = torch.arange(width)[None, None, :] < ws[:, None, None]
    return [(rows & cols).to(torch.int64)]


def get_init_inputs(feats: int = 128):
    return [feats, 10000.0]
