"""LLaVA 1.5's multimodal projector (HF LlavaMultiModalProjector, mlp2x_gelu): CLIP ViT-L/14-336
patch features (the penultimate layer, CLS dropped: 576 per image) go through Linear 1024 ->
text hidden, GELU, Linear text hidden -> text hidden; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "mm_projector_llava",
    "category": "L2",
    "models": ["LLaVA 1.5 7B", "LLaVA 1.5 13B", "LLaVA-NeXT 7B"],
    "family": "LLaVA",
    "shapes_from": "config.json of llava-hf/llava-1.5-7b-hf (vision hidden 1024, text hidden "
                   "4096, 336px / 14 = 576 image tokens), llava-1.5-13b-hf (text 5120) and "
                   "llava-v1.6-mistral-7b-hf (AnyRes: up to 5 x 576 = 2880 tokens per image)",
    "precision": "fp16",
    "description": "f (tokens, 1024) -> linear_2(gelu(linear_1(f))), both with bias; (tokens, D).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 9, "vision": 16, "text": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 4, "vision": 24, "text": 40}, "cpu": True,
         "visible": False},
        {"name": "v15_7b_1img", "params": {"tokens": 576, "vision": 1024, "text": 4096}},
        {"name": "v15_13b_8img", "params": {"tokens": 4608, "vision": 1024, "text": 5120}},
        {"name": "next_7b_anyres", "params": {"tokens": 2880, "vision": 1024, "text": 4096},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["text"] * (p["vision"] + p["text"]),
    "bytes": lambda p: 2 * (p["tokens"] * (p["vision"] + p["text"])
                            + p["text"] * (p["vision"] + p["text"])),
}


class Model(nn.Module):
    def __init__(self, vision: int = 1024, text: int = 4096, dtype=torch.float16):
        super().__init__()
        self.linear_1 = nn.Linear(vision, text, dtype=dtype)
        self.linear_2 = nn.Linear(text, text, dtype=dtype)
        nn.init.normal_(self.linear_1.weight, std=vision ** -0.5)
        nn.init.normal_(self.linear_2.weight, std=text ** -0.5)

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(f)))


def get_inputs(tokens: int = 576, vision: int = 1024, dtype=torch.float16):
    return [gen.randn(tokens, vision, dtype=dtype)]


def get_init_inputs(vision: int = 1024, text: int = 4096, dtype=torch.float16):
    return [vision, text, dtype]
