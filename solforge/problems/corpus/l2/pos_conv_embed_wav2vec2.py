"""wav2vec 2.0's convolutional relative position embedding (HF Wav2Vec2PositionalConvEmbedding):
a grouped Conv1d over time (kernel 128, padding 64, 16 groups) whose extra last frame is
dropped (SamePad), GELU, added back to the hidden states; fp16 as the encoder runs."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "pos_conv_embed_wav2vec2",
    "category": "L2",
    "models": ["wav2vec2-base", "wav2vec2-large-lv60", "HuBERT large"],
    "family": "wav2vec2",
    "shapes_from": "config.json of facebook/wav2vec2-base-960h (hidden 768, "
                   "num_conv_pos_embeddings 128, num_conv_pos_embedding_groups 16; 10 s -> 499 "
                   "frames) and wav2vec2-large-lv60 (1024)",
    "precision": "fp16",
    "description": "h (b, T, C) -> h + gelu(conv1d_grouped(h^T)[..., :T])^T.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "frames": 20, "hidden": 32, "kernel": 8,
                                         "groups": 4}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "frames": 13, "hidden": 16, "kernel": 6,
                                       "groups": 2}, "cpu": True, "visible": False},
        {"name": "base_10s_b8", "params": {"batch": 8, "frames": 499, "hidden": 768,
                                           "kernel": 128, "groups": 16}},
        {"name": "large_30s_b4", "params": {"batch": 4, "frames": 1499, "hidden": 1024,
                                            "kernel": 128, "groups": 16}},
        {"name": "base_30s_b16", "params": {"batch": 16, "frames": 1499, "hidden": 768,
                                            "kernel": 128, "groups": 16}, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["frames"] * p["hidden"] * p["kernel"]
    * p["hidden"] // p["groups"],
    "bytes": lambda p: 2 * (2 * p["batch"] * p["frames"] * p["hidden"]
                            + p["hidden"] ** 2 // p["groups"] * p["kernel"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 768, kernel: int = 128, groups: int = 16,
                 dtype=torch.float16):
        super().__init__()
        self.conv = nn.Conv1d(hidden, hidden, kernel, padding=kernel // 2, groups=groups,
                              dtype=dtype)
        nn.init.normal_(self.conv.weight, std=(kernel * hidden // groups) ** -0.5)
        self.drop_last = kernel % 2 == 0

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        y = self.conv(h.transpose(1, 2))
        if self.drop_last:
            y = y[:, :, :-1]
        return h + F.gelu(y).transpose(1, 2)


def get_inputs(batch: int = 8, frames: int = 499, hidden: int = 768, dtype=torch.float16):
    return [gen.randn(batch, frames, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 768, kernel: int = 128, groups: int = 16, dtype=torch.float16):
    return [hidden, kernel, groups, dtype]
