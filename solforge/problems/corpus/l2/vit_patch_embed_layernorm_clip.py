"""Vision embeddings of CLIP ViT (HF CLIPVisionEmbeddings + pre_layrnorm), fp16: patch conv
(kernel = stride = patch), flatten, class token, learned positions, LayerNorm."""

import torch
import torch.nn as nn

from solforge.problems import gen


def _tokens(p):
    return (p["image"] // p["patch"]) ** 2 + 1


SOLFORGE = {
    "name": "vit_patch_embed_layernorm_clip",
    "category": "L2",
    "models": ["CLIP ViT-B/16", "CLIP ViT-L/14-336 (LLaVA 1.5)"],
    "family": "CLIP",
    "shapes_from": "config.json of openai/clip-vit-base-patch16 (patch 16, hidden 768, image 224) "
                   "and clip-vit-large-patch14-336",
    "precision": "fp16",
    "description": "Patch embedding of a CLIP vision tower: Conv2d(3, hidden, patch, stride "
                   "patch, no bias), flatten to tokens, prepend the class embedding, add "
                   "position embeddings, then the pre-LayerNorm (eps 1e-5).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "image": 32, "patch": 8, "hidden": 48},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "image": 36, "patch": 12, "hidden": 40},
         "cpu": True, "visible": False},
        {"name": "vitb16_224_b1", "params": {"batch": 1, "image": 224, "patch": 16,
                                             "hidden": 768}},
        {"name": "vitb16_224_b64", "params": {"batch": 64, "image": 224, "patch": 16,
                                              "hidden": 768}},
        {"name": "vitl14_336_b16", "params": {"batch": 16, "image": 336, "patch": 14,
                                              "hidden": 1024}, "visible": False},
    ],
    # the patch GEMM, then the position add and LayerNorm (about 8 FLOPs per element)
    "flops": lambda p: 2 * p["batch"] * (_tokens(p) - 1) * p["hidden"] * 3 * p["patch"] ** 2
    + 9 * p["batch"] * _tokens(p) * p["hidden"],
    # pixels, conv weight, class and position embeddings, norm weight+bias, output (fp16)
    "bytes": lambda p: 2 * (3 * p["batch"] * p["image"] ** 2 + 3 * p["hidden"] * p["patch"] ** 2
                            + (_tokens(p) + 3) * p["hidden"]
                            + p["batch"] * _tokens(p) * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, image: int = 224, patch: int = 16, hidden: int = 768,
                 dtype=torch.float16):
        super().__init__()
        num_positions = (image // patch) ** 2 + 1
        self.class_embedding = nn.Parameter((torch.randn(hidden) * hidden ** -0.5).to(dtype))
        self.patch_embedding = nn.Conv2d(3, hidden, kernel_size=patch, stride=patch, bias=False,
                                         dtype=dtype)
        self.position_embedding = nn.Embedding(num_positions, hidden, dtype=dtype)
        nn.init.normal_(self.patch_embedding.weight, std=0.02)
        nn.init.normal_(self.position_embedding.weight, std=0.02)
        self.register_buffer("position_ids", torch.arange(num_positions).unsqueeze(0),
                             persistent=False)
        self.pre_layrnorm = nn.LayerNorm(hidden, eps=1e-5, dtype=dtype)
        with torch.no_grad():
            self.pre_layrnorm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.pre_layrnorm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        batch = pixel_values.shape[0]
        patch_embeds = self.patch_embedding(pixel_values)
        patch_embeds = patch_embeds.flatten(2).transpose(1, 2)
        class_embeds = self.class_embedding.expand(batch, 1, -1)
        embeddings = torch.cat([class_embeds, patch_embeds], dim=1)
        embeddings = embeddings + self.position_embedding(self.position_ids)
        return self.pre_layrnorm(embeddings)


def get_inputs(batch: int = 1, image: int = 224, dtype=torch.float16):
    # normalized pixels (CLIP's mean/std normalization gives roughly unit variance)
    return [gen.randn(batch, 3, image, image, dtype=dtype)]


def get_init_inputs(image: int = 224, patch: int = 16, hidden: int = 768, dtype=torch.float16):
    return [image, patch, hidden, dtype]
