"""Bias add + GELU after Whisper's fc1 (the GEMM epilogue), Whisper large-v3, fp16."""

import math

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "bias_gelu_whisper",
    "category": "L1",
    "models": ["Whisper large-v3"],
    "family": "Whisper",
    "shapes_from": "config.json of openai/whisper-large-v3: d_model 1280, encoder_ffn_dim 5120, "
                   "1500 encoder frames",
    "precision": "fp16",
    "description": "y = gelu(x + b) (exact erf GELU) on fc1's bias-free output [tokens, 5120], "
                   "as WhisperEncoderLayer's activation_fn(fc1(x)) splits into GEMM and epilogue.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "ffn": 257}, "cpu": True},
        {"name": "decoder_b8", "params": {"tokens": 8, "ffn": 5120}},
        {"name": "encoder_b1", "params": {"tokens": 1500, "ffn": 5120}},
        {"name": "encoder_b16", "params": {"tokens": 16 * 1500, "ffn": 5120}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 31, "ffn": 509}, "cpu": True, "visible": False},
    ],
    # bias add (1) and erf-GELU (~8) per element
    "flops": lambda p: 9 * p["tokens"] * p["ffn"],
    # x read, y written, bias read once (fp16)
    "bytes": lambda p: 2 * (2 * p["tokens"] * p["ffn"] + p["ffn"]),
}


class Model(nn.Module):
    def __init__(self, ffn: int = 5120, d_model: int = 1280, dtype=torch.float16):
        super().__init__()
        bound = 1.0 / math.sqrt(d_model)  # nn.Linear's bias init for fc1
        self.bias = nn.Parameter(torch.empty(ffn).uniform_(-bound, bound).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x + self.bias)


def get_inputs(tokens: int = 1500, ffn: int = 5120, dtype=torch.float16):
    return [gen.randn(tokens, ffn, dtype=dtype, scale=2.0)]


def get_init_inputs(ffn: int = 5120, dtype=torch.float16):
    return [ffn, 1280, dtype]
