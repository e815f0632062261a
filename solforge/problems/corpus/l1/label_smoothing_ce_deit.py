"""Cross-entropy with label smoothing 0.1 over the 1000 ImageNet classes, as DeiT trains (timm
LabelSmoothingCrossEntropy, the same as F.cross_entropy(label_smoothing=0.1)): the loss mixes
the true class's negative log-probability (0.9) and the mean over all classes (0.1),
averaged over the batch; fp32 logits."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "label_smoothing_ce_deit",
    "category": "L1",
    "models": ["DeiT-B", "ViT-B/16 (ImageNet-1k fine-tuning)"],
    "family": "DeiT",
    "shapes_from": "DeiT's training recipe (facebookresearch/deit main.py: smoothing 0.1, batch "
                   "1024 over 8 GPUs = 128 per GPU, 1000 classes) and ImageNet-21k pretraining "
                   "(21841 classes)",
    "precision": "fp32",
    "description": "logits (b, K), labels (b,) -> mean_b[0.9 * -log p[label] + 0.1 * mean_k(-log "
                   "p)].",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 8, "classes": 10}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "classes": 37}, "cpu": True, "visible": False},
        {"name": "in1k_b128", "params": {"batch": 128, "classes": 1000}},
        {"name": "in1k_b1024", "params": {"batch": 1024, "classes": 1000}},
        {"name": "in21k_b256", "params": {"batch": 256, "classes": 21841}, "visible": False},
    ],
    "flops": lambda p: 5 * p["batch"] * p["classes"],
    "bytes": lambda p: 4 * p["batch"] * p["classes"] + 8 * p["batch"],
}


class Model(nn.Module):
    def __init__(self, smoothing: float = 0.1):
        super().__init__()
        self.smoothing = smoothing

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels, label_smoothing=self.smoothing)


def get_inputs(batch: int = 128, classes: int = 1000):
    return [gen.randn(batch, classes, scale=4.0), gen.indices(classes, batch)]


def get_init_inputs():
    return [0.1]
