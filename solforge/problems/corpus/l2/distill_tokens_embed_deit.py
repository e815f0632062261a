"""DeiT's token assembly after patch embedding (HF DeiTEmbeddings): a 16x16 stride-16 conv
patchifies the image, the class token and the distillation token are prepended, and the
learned position embedding (num_patches + 2) is added; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "distill_tokens_embed_deit",
    "category": "L2",
    "models": ["DeiT-B distilled", "DeiT-S distilled"],
    "family": "DeiT",
    "shapes_from": "config.json of facebook/deit-base-distilled-patch16-224 (hidden 768, patch "
                   "16, 224px -> 196 patches + 2 tokens), deit-base-distilled-patch16-384 (576 + "
                   "2) and deit-small-distilled-patch16-224 (384)",
    "precision": "fp16",
    "description": "pixels (b, 3, S, S) -> conv16x16/16 -> (b, N, C) -> cat(cls, dist, patches) + "
                   "pos (N + 2, C).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "image": 32, "hidden": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "image": 48, "hidden": 24}, "cpu": True,
         "visible": False},
        {"name": "base_224_b128", "params": {"batch": 128, "image": 224, "hidden": 768}},
        {"name": "base_384_b32", "params": {"batch": 32, "image": 384, "hidden": 768}},
        {"name": "small_224_b256", "params": {"batch": 256, "image": 224, "hidden": 384},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * (p["image"] // 16) ** 2 * 768 * p["hidden"],
    "bytes": lambda p: 2 * (p["batch"] * 3 * p["image"] ** 2 + 768 * p["hidden"]
                            + p["batch"] * ((p["image"] // 16) ** 2 + 2) * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, image: int = 224, hidden: int = 768, dtype=torch.float16):
        super().__init__()
        n = (image // 16) ** 2
        self.proj = nn.Conv2d(3, hidden, 16, stride=16, dtype=dtype)
        self.cls_token = nn.Parameter(torch.randn(1, 1, hidden, dtype=dtype))
        self.dist_token = nn.Parameter(torch.randn(1, 1, hidden, dtype=dtype))
        self.pos = nn.Parameter((0.5 * torch.randn(1, n + 2, hidden)).to(dtype))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.proj(pixels).flatten(2).transpose(1, 2)
        b = x.shape[0]
        x = torch.cat((self.cls_token.expand(b, -1, -1), self.dist_token.expand(b, -1, -1), x), 1)
        return x + self.pos


def get_inputs(batch: int = 128, image: int = 224, dtype=torch.float16):
    # normalized pixels (ImageNet mean/std applied): roughly unit scale
    return [gen.randn(batch, 3, image, image, dtype=dtype)]


def get_init_inputs(image: int = 224, hidden: int = 768, dtype=torch.float16):
    return [image, hidden, dtype]
