"""BERT's embedding backward: word (30522 with padding id 0), position (512) and token-type (2)
tables, whose sum feeds the first LayerNorm; each table's gradient is a scatter-add of the same
upstream gradient, the padding row excluded; fp32 (BERT's training precision)."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "embedding_bwd_bert",
    "category": "L2",
    "direction": "backward",
    "family": "BERT",
    "models": ["BERT base", "BERT large"],
    "shapes_from": "google-bert/bert-base-uncased and bert-large-uncased config.json: "
                   "vocab_size 30522, max_position_embeddings 512, type_vocab_size 2, "
                   "pad_token_id 0, hidden_size 768 / 1024",
    "precision": "fp32_grad",
    "description": "Backward of e = Wword[ids] + Wpos[arange(S)] + Wtype[types] (BertEmbeddings, "
                   "word embedding with padding_idx 0). Inputs grad_out (B, S, H) fp32, ids "
                   "(B, S) with right padding (id 0), types (B, S) in {0, 1}. Returns dWword "
                   "(V, H) (row 0 stays zero: padding_idx), dWpos (512, H) (sums over the "
                   "batch), dWtype (2, H) (sums over every token).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 3, "seq": 10, "hidden": 16, "vocab": 200},
         "cpu": True},
        {"name": "train_b32_s512_base", "params": {"batch": 32, "seq": 512, "hidden": 768}},
        {"name": "train_b64_s128_large", "params": {"batch": 64, "seq": 128, "hidden": 1024}},
        {"name": "train_b32_s512_large", "params": {"batch": 32, "seq": 512, "hidden": 1024},
         "visible": False},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 17, "hidden": 24, "vocab": 333},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 3 * p["batch"] * p["seq"] * p["hidden"],
    # grad_out read once, ids and types read, the three tables written (fp32)
    "bytes": lambda p: 4 * p["batch"] * p["seq"] * p["hidden"] + 16 * p["batch"] * p["seq"]
    + 4 * (p.get("vocab", 30522) + 512 + 2) * p["hidden"],
}

PAD, MAX_POS, TYPES = 0, 512, 2


class Model(nn.Module):
    def __init__(self, vocab: int = 30522):
        super().__init__()
        self.vocab = vocab

    def forward(self, grad_out, ids, types):
        b, s, h = grad_out.shape
        g = grad_out.reshape(b * s, h).float()
        flat = ids.reshape(-1)
        keep = flat != PAD
        word = torch.zeros(self.vocab, h, dtype=torch.float32, device=g.device)
        word.index_add_(0, flat[keep], g[keep])
        pos = torch.zeros(MAX_POS, h, dtype=torch.float32, device=g.device)
        pos[:s] = grad_out.float().sum(0)
        typ = torch.zeros(TYPES, h, dtype=torch.float32, device=g.device)
        typ.index_add_(0, types.reshape(-1), g)
        dt = grad_out.dtype
        return word.to(dt), pos.to(dt), typ.to(dt)


def autograd_forward(model, grad_out, ids, types):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    h, dt = grad_out.shape[-1], grad_out.dtype
    tables = [torch.zeros(model.vocab, h, dtype=dt), torch.zeros(MAX_POS, h, dtype=dt),
              torch.zeros(TYPES, h, dtype=dt)]

    def fn(word, pos, typ):
        positions = torch.arange(ids.shape[1])
        return (nn.functional.embedding(ids, word, padding_idx=PAD) + pos[positions]
                + typ[types])
    return fn, tables, [grad_out]


def get_inputs(batch: int = 32, seq: int = 512, hidden: int = 768, vocab: int = 30522,
               dtype=torch.float32):
    ids = gen.indices(vocab - 1, batch, seq) + 1
    keep = gen.padding_mask(gen.lengths(batch, seq, min_len=seq // 4), seq)
    ids = ids.masked_fill(~keep, PAD)  # right padding: the padded positions carry id 0
    types = (torch.arange(seq).unsqueeze(0) >= gen.indices(seq, batch, 1)).long()
    return [gen.randn(batch, seq, hidden, dtype=dtype), ids, types]


def get_init_inputs(vocab: int = 30522):
    return [vocab]
