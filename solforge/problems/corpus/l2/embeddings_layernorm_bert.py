"""BERT's input embeddings (HF BertEmbeddings, eval mode): word, absolute position and token
type embeddings summed, then LayerNorm (eps 1e-12); fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "embeddings_layernorm_bert",
    "category": "L2",
    "models": ["BERT base uncased", "BERT large uncased"],
    "family": "BERT",
    "shapes_from": "config.json of google-bert/bert-base-uncased (vocab_size 30522, hidden_size "
                   "768, max_position_embeddings 512, type_vocab_size 2, layer_norm_eps 1e-12) "
                   "and bert-large-uncased (1024)",
    "precision": "fp16",
    "description": "ids, type_ids (b, s) -> LN(W[ids] + P[0..s) + T[type_ids]).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 7, "vocab": 100, "hidden": 32,
                                         "max_pos": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 1, "seq": 5, "vocab": 50, "hidden": 24,
                                       "max_pos": 8}, "cpu": True, "visible": False},
        {"name": "base_b64_s128", "params": {"batch": 64, "seq": 128, "vocab": 30522,
                                             "hidden": 768, "max_pos": 512}},
        {"name": "large_b32_s512", "params": {"batch": 32, "seq": 512, "vocab": 30522,
                                              "hidden": 1024, "max_pos": 512}},
        {"name": "base_b256_s512", "params": {"batch": 256, "seq": 512, "vocab": 30522,
                                              "hidden": 768, "max_pos": 512}, "visible": False},
    ],
    "flops": lambda p: 10 * p["batch"] * p["seq"] * p["hidden"],
    "bytes": lambda p: 2 * p["batch"] * p["seq"] * p["hidden"] * 3 + 16 * p["batch"] * p["seq"],
}


class Model(nn.Module):
    def __init__(self, vocab: int = 30522, hidden: int = 768, max_pos: int = 512,
                 dtype=torch.float16):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden, dtype=dtype)
        self.position = nn.Embedding(max_pos, hidden, dtype=dtype)
        self.token_type = nn.Embedding(2, hidden, dtype=dtype)
        self.norm = nn.LayerNorm(hidden, eps=1e-12, dtype=dtype)

    def forward(self, ids: torch.Tensor, type_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.word(ids) + self.position(pos)[None] + self.token_type(type_ids))


def get_inputs(batch: int = 64, seq: int = 128, vocab: int = 30522):
    # sentence pairs: segment B starts at a random split point
    split = gen.lengths(batch, seq)
    type_ids = (torch.arange(seq)[None, :] >= split[:, None]).to(torch.int64)
    return [gen.indices(vocab, batch, seq), type_ids]


def get_init_inputs(vocab: int = 30522, hidden: int = 768, max_pos: int = 512,
                    dtype=torch.float16):
    return [vocab, hidden, max_pos, dtype]
