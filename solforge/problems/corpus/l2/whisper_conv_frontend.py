"""Convolutional front-end of the Whisper encoder (HF WhisperEncoder), fp16: Conv1d(mels, d, 3)
+ GELU, Conv1d(d, d, 3, stride 2) + GELU, to (batch, time, d), plus sinusoidal positions."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen


def _t_out(p):
    return (p["frames"] - 1) // 2 + 1


SOLFORGE = {
    "name": "whisper_conv_frontend",
    "category": "L2",
    "models": ["Whisper large-v3", "Whisper base"],
    "family": "Whisper",
    "shapes_from": "config.json of openai/whisper-large-v3 (num_mel_bins 128, d_model 1280, 3000 "
                   "frames) and whisper-base (80 mels, d_model 512)",
    "precision": "fp16",
    "description": "Whisper's audio stem: two 1-D convolutions (kernel 3, the second stride 2) "
                   "each followed by exact GELU, transposed to tokens, with the fixed "
                   "sinusoidal position embedding added.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "mels": 16, "d": 32, "frames": 34},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "mels": 12, "d": 40, "frames": 25},
         "cpu": True, "visible": False},
        {"name": "large_v3_b1", "params": {"batch": 1, "mels": 128, "d": 1280, "frames": 3000}},
        {"name": "base_b8", "params": {"batch": 8, "mels": 80, "d": 512, "frames": 3000}},
        {"name": "large_v3_b16", "params": {"batch": 16, "mels": 128, "d": 1280,
                                            "frames": 3000}, "visible": False},
    ],
    # both convolutions, GELU on both activations (about 8 FLOPs each), the position add
    "flops": lambda p: 6 * p["batch"] * p["d"] * (p["frames"] * p["mels"] + _t_out(p) * p["d"])
    + 8 * p["batch"] * p["d"] * (p["frames"] + _t_out(p)) + p["batch"] * _t_out(p) * p["d"],
    # features, both convs' weights and biases, positions, output (fp16)
    "bytes": lambda p: 2 * (p["batch"] * p["mels"] * p["frames"]
                            + 3 * p["d"] * (p["mels"] + p["d"]) + 2 * p["d"]
                            + _t_out(p) * p["d"] * (1 + p["batch"])),
}


def sinusoids(length: int, channels: int, max_timescale: float = 10000) -> torch.Tensor:
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)


class Model(nn.Module):
    def __init__(self, mels: int = 128, d: int = 1280, max_positions: int = 1500,
                 dtype=torch.float16):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, d, kernel_size=3, padding=1, dtype=dtype)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1, dtype=dtype)
        self.embed_positions = nn.Embedding(max_positions, d, dtype=dtype)
        with torch.no_grad():
            self.embed_positions.weight.copy_(sinusoids(max_positions, d))

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        inputs_embeds = F.gelu(self.conv1(input_features))
        inputs_embeds = F.gelu(self.conv2(inputs_embeds))
        inputs_embeds = inputs_embeds.permute(0, 2, 1)
        embed_pos = self.embed_positions.weight[: inputs_embeds.shape[1]]
        return inputs_embeds + embed_pos


def get_inputs(batch: int = 1, mels: int = 128, frames: int = 3000, dtype=torch.float16):
    # normalized log-mel features lie roughly in [-1, 1]
    return [gen.randn(batch, mels, frames, dtype=dtype, scale=0.5)]


def get_init_inputs(mels: int = 128, d: int = 1280, frames: int = 3000, dtype=torch.float16):
    return [mels, d, max(1500, (frames - 1) // 2 + 1), dtype]
