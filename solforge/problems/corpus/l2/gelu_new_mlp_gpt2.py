"""GPT-2's MLP (HF GPT2MLP with Conv1D layers, weights stored (in, out)): c_fc to 4 x hidden
with bias, gelu_new (the tanh approximation), c_proj back with bias; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "gelu_new_mlp_gpt2",
    "category": "L2",
    "models": ["GPT-2", "GPT-2 medium", "GPT-2 XL"],
    "family": "GPT-2",
    "shapes_from": "config.json of openai-community/gpt2 (n_embd 768, n_inner 4 x 768, "
                   "activation_function gelu_new, n_positions 1024), gpt2-medium (1024) and "
                   "gpt2-xl (1600)",
    "precision": "fp16",
    "description": "x (b, s, H) -> gelu_tanh(x @ W_fc + b_fc) @ W_proj + b_proj, W stored as "
                   "(in, out).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "seq": 5, "hidden": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "seq": 3, "hidden": 20}, "cpu": True,
         "visible": False},
        {"name": "small_b8_s1024", "params": {"batch": 8, "seq": 1024, "hidden": 768}},
        {"name": "xl_b64_decode", "params": {"batch": 64, "seq": 1, "hidden": 1600}},
        {"name": "xl_b4_s1024", "params": {"batch": 4, "seq": 1024, "hidden": 1600},
         "visible": False},
    ],
    "flops": lambda p: 16 * p["batch"] * p["seq"] * p["hidden"] ** 2,
    "bytes": lambda p: 2 * (8 * p["hidden"] ** 2 + 2 * p["batch"] * p["seq"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 768, dtype=torch.float16):
        super().__init__()
        self.w_fc = nn.Parameter((torch.randn(hidden, 4 * hidden) * hidden ** -0.5).to(dtype))
        self.b_fc = nn.Parameter((0.1 * torch.randn(4 * hidden)).to(dtype))
        self.w_proj = nn.Parameter((torch.randn(4 * hidden, hidden) * (4 * hidden) ** -0.5)
                                   .to(dtype))
        self.b_proj = nn.Parameter((0.1 * torch.randn(hidden)).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(torch.addmm(self.b_fc, x.view(-1, x.shape[-1]), self.w_fc), approximate="tanh")
        return torch.addmm(self.b_proj, h, self.w_proj).view(x.shape)


def get_inputs(batch: int = 8, seq: int = 1024, hidden: int = 768, dtype=torch.float16):
    return [gen.randn(batch, seq, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 768, dtype=torch.float16):
    return [hidden, dtype]
