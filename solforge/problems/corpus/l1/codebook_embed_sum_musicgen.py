"""MusicGen's decoder input embedding (HF MusicgenForCausalLM): each frame carries one token
per EnCodec codebook (4 codebooks, delay pattern applied upstream), each codebook has its own
embedding table of 2048 + 1 entries (the extra one the pad/BOS), and the frame's input is the
sum of the 4 lookups; fp16. The 4 tables are stored stacked, as one (4 * vocab, hidden)
matrix, each codebook's ids offset by its table's start."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "codebook_embed_sum_musicgen",
    "category": "L1",
    "models": ["MusicGen small", "MusicGen medium", "MusicGen large"],
    "family": "MusicGen",
    "shapes_from": "config.json of facebook/musicgen-small (decoder hidden_size 1024, "
                   "num_codebooks 4, vocab_size 2048), musicgen-medium (1536) and musicgen-large "
                   "(2048); 50 frames/s, 30 s = 1500 frames",
    "precision": "fp16",
    "description": "codes (b, 4, T) int64 -> sum_k E_k[codes[:, k]] : (b, T, hidden).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "frames": 5, "codebooks": 4, "vocab": 33,
                                         "hidden": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "frames": 3, "codebooks": 2, "vocab": 9,
                                       "hidden": 8}, "cpu": True, "visible": False},
        {"name": "decode_b8_large", "params": {"batch": 8, "frames": 1, "codebooks": 4,
                                               "vocab": 2049, "hidden": 2048}},
        {"name": "prompt_30s_b4_medium", "params": {"batch": 4, "frames": 1500, "codebooks": 4,
                                                    "vocab": 2049, "hidden": 1536}},
        {"name": "decode_b64_small", "params": {"batch": 64, "frames": 1, "codebooks": 4,
                                                "vocab": 2049, "hidden": 1024},
         "visible": False},
    ],
    "flops": lambda p: (p["codebooks"] - 1) * p["batch"] * p["frames"] * p["hidden"],
    "bytes": lambda p: 2 * p["batch"] * p["frames"] * p["hidden"] * (p["codebooks"] + 1)
    + 8 * p["batch"] * p["codebooks"] * p["frames"],
}


class Model(nn.Module):
    def __init__(self, codebooks: int = 4, vocab: int = 2049, hidden: int = 1024,
                 dtype=torch.float16):
        super().__init__()
        self.tables = nn.Parameter(torch.randn(codebooks * vocab, hidden).to(dtype))
        self.register_buffer("offsets", torch.arange(codebooks) * vocab)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        rows = F.embedding(codes + self.offsets[None, :, None], self.tables)  # (b, K, T, H)
        return rows.sum(dim=1)


def get_inputs(batch: int = 8, frames: int = 1, codebooks: int = 4, vocab: int = 2049):
    return [gen.indices(vocab, batch, codebooks, frames)]


def get_init_inputs(codebooks: int = 4, vocab: int = 2049, hidden: int = 1024,
                    dtype=torch.float16):
    return [codebooks, vocab, hidden, dtype]
