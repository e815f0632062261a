"""OPT's learned positional embedding (HF OPTLearnedPositionalEmbedding): positions come
from the attention mask's cumulative sum (so left padding does not shift them), minus 1,
offset by 2 (the table's first two rows are reserved), and look up a (2048 + 2, hidden)
table; added to the scaled token embeddings; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "learned_pos_embed_opt",
    "category": "L1",
    "models": ["OPT 6.7B", "OPT 1.3B"],
    "family": "OPT",
    "shapes_from": "config.json of facebook/opt-6.7b (hidden_size 4096, max_position_embeddings "
                   "2048, word_embed_proj_dim 4096) and opt-1.3b (2048)",
    "precision": "fp16",
    "description": "mask (b, s) of 1s after left padding 0s; pos = cumsum(mask) * mask - 1 + 2; "
                   "out = tok_emb + P[pos] with tok_emb (b, s, H) given.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 7, "hidden": 16, "max_pos": 16},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "seq": 4, "hidden": 8, "max_pos": 8},
         "cpu": True, "visible": False},
        {"name": "prefill_b8_s2048_6p7b", "params": {"batch": 8, "seq": 2048, "hidden": 4096,
                                                     "max_pos": 2048}},
        {"name": "prefill_b32_s512_1p3b", "params": {"batch": 32, "seq": 512, "hidden": 2048,
                                                     "max_pos": 2048}},
        {"name": "prefill_b2_s2048_6p7b", "params": {"batch": 2, "seq": 2048, "hidden": 4096,
                                                     "max_pos": 2048}, "visible": False},
    ],
    "flops": lambda p: p["batch"] * p["seq"] * (p["hidden"] + 2),
    "bytes": lambda p: 2 * 3 * p["batch"] * p["seq"] * p["hidden"] + 8 * p["batch"] * p["seq"],
}


class Model(nn.Module):
    def __init__(self, max_pos: int = 2048, hidden: int = 4096, dtype=torch.float16):
        super().__init__()
        self.offset = 2
        self.table = nn.Embedding(max_pos + self.offset, hidden, dtype=dtype)

    def forward(self, tok_emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pos = (torch.cumsum(mask, dim=1) * mask).long() - 1
        return tok_emb + self.table(pos + self.offset)


def get_inputs(batch: int = 8, seq: int = 2048, hidden: int = 4096, dtype=torch.float16):
    # left padding of a random length per sequence; one sequence full
    valid = gen.lengths(batch, seq)
    mask = (torch.arange(seq)[None, :] >= (seq - valid)[:, None]).to(torch.int64)
    return [gen.randn(batch, seq, hidden, dtype=dtype), mask]


def get_init_inputs(max_pos: int = 2048, hidden: int = 4096, dtype=torch.float16):
    return [max_pos, hidden, dtype]
