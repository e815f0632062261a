"""CLIP's contrastive logits (HF CLIPModel.forward): image and text embeddings L2-normalized,
cosine similarities scaled by exp(logit_scale) (100 at the trained clamp); returns
logits_per_text (texts, images) and logits_per_image, its transpose; fp16 embeddings, as CLIP
zero-shot classification and retrieval run."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "contrastive_logits_clip",
    "category": "L2",
    "models": ["CLIP ViT-L/14", "CLIP ViT-B/32"],
    "family": "CLIP",
    "shapes_from": "config.json of openai/clip-vit-large-patch14 (projection_dim 768, "
                   "logit_scale_init_value 2.6592, trained to ln 100) and clip-vit-base-patch32 "
                   "(512); zero-shot ImageNet (1000 class prompts) and retrieval batches",
    "precision": "fp16",
    "description": "img (I, D), txt (T, D) -> t = txt/|txt|, i = img/|img|; per_text = 100 * t "
                   "i^T; "
                   "returns (per_text, per_text^T).",
    "workloads": [
        {"name": "cpu_small", "params": {"images": 6, "texts": 5, "dim": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"images": 3, "texts": 9, "dim": 24}, "cpu": True,
         "visible": False},
        {"name": "zeroshot_in1k_b256_l14", "params": {"images": 256, "texts": 1000, "dim": 768}},
        {"name": "retrieval_4k_b32", "params": {"images": 4096, "texts": 4096, "dim": 512}},
        {"name": "zeroshot_in1k_b1024_l14", "params": {"images": 1024, "texts": 1000,
                                                       "dim": 768}, "visible": False},
    ],
    "flops": lambda p: 2 * p["images"] * p["texts"] * p["dim"]
    + 3 * (p["images"] + p["texts"]) * p["dim"],
    "bytes": lambda p: 2 * ((p["images"] + p["texts"]) * p["dim"] + 2 * p["images"] * p["texts"]),
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(math.log(100.0)))

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor):
        image_embeds = image_embeds / image_embeds.norm(p=2, dim=-1, keepdim=True)
        text_embeds = text_embeds / text_embeds.norm(p=2, dim=-1, keepdim=True)
        per_text = torch.matmul(text_embeds, image_embeds.t()) * self.logit_scale.exp().to(
            text_embeds.dtype)
        return per_text, per_text.t()


def get_inputs(images: int = 256, texts: int = 1000, dim: int = 768, dtype=torch.float16):
    return [gen.randn(images, dim, dtype=dtype), gen.randn(texts, dim, dtype=dtype)]


def get_init_inputs():
    return []
