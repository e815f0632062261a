"""Whisper decoder cross-attention (HF WhisperAttention as encoder_attn): decoder queries
attend, unmasked, to keys and values projected from the 1500 encoder frames of a 30 s
window; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "cross_attention_whisper",
    "category": "attention",
    "models": ["Whisper large-v3", "Whisper small"],
    "family": "Whisper",
    "shapes_from": "config.json of openai/whisper-large-v3 (d_model 1280, decoder_attention_heads "
                   "20, head_dim 64, max_source_positions 1500, max_target_positions 448) and "
                   "whisper-small (768, 12 heads)",
    "precision": "fp16",
    "description": "softmax(q k^T / 8) v with q (batch, heads, q_len, 64) from the decoder and "
                   "k, v (batch, heads, 1500, 64) from the encoder output; no mask.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "q_len": 3, "frames": 30, "heads": 2,
                                         "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "q_len": 1, "frames": 47, "heads": 3,
                                       "head_dim": 8}, "cpu": True, "visible": False},
        {"name": "decode_b16_large", "params": {"batch": 16, "q_len": 1, "frames": 1500,
                                                "heads": 20, "head_dim": 64}},
        {"name": "prompt_b4_q448_large", "params": {"batch": 4, "q_len": 448, "frames": 1500,
                                                    "heads": 20, "head_dim": 64}},
        {"name": "decode_b64_small", "params": {"batch": 64, "q_len": 1, "frames": 1500,
                                                "heads": 12, "head_dim": 64}, "visible": False},
    ],
    "flops": lambda p: 4 * p["batch"] * p["heads"] * p["q_len"] * p["frames"] * p["head_dim"],
    "bytes": lambda p: 2 * p["batch"] * p["heads"] * p["head_dim"]
    * (2 * p["q_len"] + 2 * p["frames"]),
}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs(batch: int = 16, q_len: int = 1, frames: int = 1500, heads: int = 20,
               head_dim: int = 64, dtype=torch.float16):
    q = gen.randn(batch, heads, q_len, head_dim, dtype=dtype, scale=1.5)
    k = gen.randn(batch, heads, frames, head_dim, dtype=dtype, scale=1.5)
    v = gen.randn(batch, heads, frames, head_dim, dtype=dtype)
    return [q, k, v]


def get_init_inputs():
    return []
