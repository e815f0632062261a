"""OPT's decoder feed-forward with its pre-LayerNorm and residual (HF OPTDecoderLayer, the
FFN half): LayerNorm, fc1 hidden -> 4 hidden (bias), ReLU, fc2 back (bias), plus the
residual; fp16 as OPT checkpoints ship."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "relu_ffn_opt",
    "category": "L2",
    "models": ["OPT 6.7B", "OPT 13B", "OPT 66B"],
    "family": "OPT",
    "shapes_from": "config.json of facebook/opt-6.7b (hidden_size 4096, ffn_dim 16384, "
                   "activation relu, do_layer_norm_before), opt-13b (5120, 20480) and opt-66b "
                   "(9216, 36864; 4608 per GPU at TP 8)",
    "precision": "fp16",
    "description": "x (tokens, H) -> x + fc2(relu(fc1(LN(x)))).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "hidden": 32, "ffn": 128}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 40, "ffn": 96}, "cpu": True,
         "visible": False},
        {"name": "decode_b64_6p7b", "params": {"tokens": 64, "hidden": 4096, "ffn": 16384}},
        {"name": "prefill_2k_13b", "params": {"tokens": 2048, "hidden": 5120, "ffn": 20480}},
        {"name": "prefill_2k_66b_tp8", "params": {"tokens": 2048, "hidden": 9216, "ffn": 4608},
         "visible": False},
    ],
    "flops": lambda p: 4 * p["tokens"] * p["hidden"] * p["ffn"] + 8 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 2 * (2 * p["hidden"] * p["ffn"] + 2 * p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, ffn: int = 16384, dtype=torch.float16):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, dtype=dtype)
        self.fc1 = nn.Linear(hidden, ffn, dtype=dtype)
        self.fc2 = nn.Linear(ffn, hidden, dtype=dtype)
        nn.init.normal_(self.fc1.weight, std=hidden ** -0.5)
        nn.init.normal_(self.fc2.weight, std=ffn ** -0.5)
        with torch.no_grad():
            self.fc1.bias.normal_(0, 0.3)  # some units off, as ReLU FFNs are sparse

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


def get_inputs(tokens: int = 64, hidden: int = 4096, dtype=torch.float16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 4096, ffn: int = 16384, dtype=torch.float16):
    return [hidden, ffn, dtype]
