"""wav2vec 2.0's first feature-encoder layer (HF Wav2Vec2GroupNormConvLayer): the raw 16 kHz
waveform through Conv1d(1, 512, kernel 10, stride 5, no bias), GroupNorm with one group per
channel (each channel normalized over time), GELU; fp32 as the feature encoder runs."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "feature_conv_wav2vec2",
    "category": "L2",
    "models": ["wav2vec2-base", "HuBERT base"],
    "family": "wav2vec2",
    "shapes_from": "config.json of facebook/wav2vec2-base-960h (conv_dim[0] 512, conv_kernel[0] "
                   "10, conv_stride[0] 5, feat_extract_norm group) and facebook/hubert-base-ls960; "
                   "16 kHz audio, 10 s = 160000 samples",
    "precision": "tf32",
    "description": "wave (b, 1, samples) -> conv1d k10 s5 -> GroupNorm(512 groups, eps 1e-5) -> "
                   "GELU: (b, 512, (samples - 10) // 5 + 1).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "samples": 400, "channels": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "samples": 333, "channels": 8}, "cpu": True,
         "visible": False},
        {"name": "base_10s_b8", "params": {"batch": 8, "samples": 160000, "channels": 512}},
        {"name": "base_30s_b1", "params": {"batch": 1, "samples": 480000, "channels": 512}},
        {"name": "base_5s_b32", "params": {"batch": 32, "samples": 80000, "channels": 512},
         "visible": False},
    ],
    "flops": lambda p: 2 * 10 * p["batch"] * p["channels"] * (p["samples"] // 5)
    + 8 * p["batch"] * p["channels"] * (p["samples"] // 5),
    "bytes": lambda p: 4 * (p["batch"] * p["samples"]
                            + p["batch"] * p["channels"] * (p["samples"] // 5)),
}


class Model(nn.Module):
    def __init__(self, channels: int = 512):
        super().__init__()
        self.conv = nn.Conv1d(1, channels, 10, stride=5, bias=False)
        self.norm = nn.GroupNorm(channels, channels, affine=True)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_(0, 0.2)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(self.conv(wave)))


def get_inputs(batch: int = 8, samples: int = 160000):
    # normalized audio (zero mean, unit variance: Wav2Vec2FeatureExtractor do_normalize)
    return [gen.randn(batch, 1, samples)]


def get_init_inputs(channels: int = 512):
    return [channels]
