"""LayerNorm of Whisper large-v3 (d_model 1280, eps 1e-5), fp16 activations as Whisper runs."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "layernorm_whisper",
    "category": "L1",
    "models": ["Whisper large-v3"],
    "family": "Whisper",
    "shapes_from": "config.json of openai/whisper-large-v3: d_model 1280, 1500 encoder frames",
    "precision": "fp16",
    "description": "nn.LayerNorm(1280) over every frame of the Whisper encoder (1500 frames per 30 "
                   "s clip) or every token of the decoder, fp16 in and out (HF "
                   "WhisperEncoderLayer).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "hidden": 257}, "cpu": True},
        {"name": "decoder_b8", "params": {"tokens": 8, "hidden": 1280}},
        {"name": "encoder_b1", "params": {"tokens": 1500, "hidden": 1280}},
        {"name": "encoder_b16", "params": {"tokens": 16 * 1500, "hidden": 1280},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 31, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    # mean (1), centre + square + sum (3), normalise (2), affine (2) per element
    "flops": lambda p: 8 * p["tokens"] * p["hidden"],
    # x read, y written, w and b read (fp16)
    "bytes": lambda p: 2 * (2 * p["tokens"] * p["hidden"] + 2 * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 1280, eps: float = 1e-5, dtype=torch.float16):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps, dtype=dtype)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.02 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs(tokens: int = 1500, hidden: int = 1280, dtype=torch.float16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 1280, dtype=torch.float16):
    return [hidden, 1e-5, dtype]
