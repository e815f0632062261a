"""RoBERTa's position embedding (HF RobertaEmbeddings.create_position_ids_from_input_ids):
positions count only non-padding tokens, starting after padding_idx (1), so padding tokens get
position 1 and the i-th real token padding_idx + i; the positions then look up the (514,
hidden) table; fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "position_ids_embed_roberta",
    "category": "L1",
    "models": ["RoBERTa base", "RoBERTa large", "XLM-R large"],
    "family": "RoBERTa",
    "shapes_from": "config.json of FacebookAI/roberta-base (hidden 768, max_position_embeddings "
                   "514, pad_token_id 1, vocab 50265), roberta-large (1024) and "
                   "xlm-roberta-large (1024, vocab 250002)",
    "precision": "fp16",
    "description": "ids (b, s) with pad id 1 on the right -> mask = ids != 1; pos = cumsum(mask) * "
                   "mask + 1; out = P[pos] (b, s, H).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 3, "seq": 9, "hidden": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 5, "hidden": 8}, "cpu": True,
         "visible": False},
        {"name": "base_b64_s512", "params": {"batch": 64, "seq": 512, "hidden": 768}},
        {"name": "large_b256_s128", "params": {"batch": 256, "seq": 128, "hidden": 1024}},
        {"name": "large_b32_s512", "params": {"batch": 32, "seq": 512, "hidden": 1024},
         "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["seq"],
    "bytes": lambda p: 2 * p["batch"] * p["seq"] * p["hidden"] + 8 * p["batch"] * p["seq"],
}


class Model(nn.Module):
    def __init__(self, hidden: int = 768, max_pos: int = 514, padding_idx: int = 1,
                 dtype=torch.float16):
        super().__init__()
        self.padding_idx = padding_idx
        self.table = nn.Embedding(max_pos, hidden, padding_idx=padding_idx, dtype=dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = ids.ne(self.padding_idx).int()
        pos = (torch.cumsum(mask, dim=1) * mask).long() + self.padding_idx
        return self.table(pos)


def get_inputs(batch: int = 64, seq: int = 512, vocab: int = 50265):
    ids = gen.indices(vocab - 3, batch, seq) + 3  # real tokens, never the pad id
    valid = gen.lengths(batch, seq)
    return [torch.where(torch.arange(seq)[None, :] < valid[:, None], ids, torch.ones_like(ids))]


def get_init_inputs(hidden: int = 768, dtype=torch.float16):
    return [hidden, 514, 1, dtype]
