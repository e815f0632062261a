"""SigLIP's pairwise sigmoid loss (Zhai et al. 2023; big_vision's siglip loss and HF
SiglipModel with return_loss): every image-text pair is a binary classification, positives on
the diagonal; logits = t i^T * exp(t') + b with learned temperature and bias; loss = -sum log
sigmoid(label * logits) / batch; fp32 (the loss is taken in fp32)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "sigmoid_loss_siglip",
    "category": "L2",
    "models": ["SigLIP so400m/14", "SigLIP B/16"],
    "family": "SigLIP",
    "shapes_from": "config.json of google/siglip-so400m-patch14-384 (embedding dim 1152) and "
                   "siglip-base-patch16-224 (768); big_vision's init t' = log 10, b = -10; "
                   "per-device batches of 512 to 4096 (the paper's 32k over chips)",
    "precision": "fp32",
    "description": "img, txt (n, D) L2-normalized; logits = t i^T e^t' + b; labels 2 I - 1; loss = "
                   "-sum(logsigmoid(labels * logits)) / n (a scalar).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 8, "dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 5, "dim": 12}, "cpu": True, "visible": False},
        {"name": "so400m_b1024", "params": {"batch": 1024, "dim": 1152}},
        {"name": "b16_b4096", "params": {"batch": 4096, "dim": 768}},
        {"name": "so400m_b2048", "params": {"batch": 2048, "dim": 1152}, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] ** 2 * p["dim"] + 6 * p["batch"] ** 2,
    "bytes": lambda p: 4 * 2 * p["batch"] * p["dim"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.logit_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.logit_bias = nn.Parameter(torch.tensor(-10.0))

    def forward(self, image_embeds: torch.Tensor, text_embeds: torch.Tensor) -> torch.Tensor:
        img = image_embeds / image_embeds.norm(dim=-1, keepdim=True)
        txt = text_embeds / text_embeds.norm(dim=-1, keepdim=True)
        logits = txt @ img.t() * self.logit_scale.exp() + self.logit_bias
        n = logits.shape[0]
        labels = 2 * torch.eye(n, device=logits.device) - 1
        return -F.logsigmoid(labels * logits).sum() / n


def get_inputs(batch: int = 1024, dim: int = 1152):
    # matched pairs: each text embedding is its image's plus noise, so positives score higher
    img = gen.randn(batch, dim)
    return [img, img + gen.randn(batch, dim, scale=1.5)]


def get_init_inputs():
    return []
