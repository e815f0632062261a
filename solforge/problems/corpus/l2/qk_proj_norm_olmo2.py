"""OLMo 2's query/key projections with QK-norm over the whole projection (HF Olmo2Attention):
q = RMSNorm(x W_q^T) and k = RMSNorm(x W_k^T), each normalized across all heads at once
(weights of length heads * head_dim, not per head as Qwen3 does); bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "qk_proj_norm_olmo2",
    "category": "L2",
    "models": ["OLMo 2 7B", "OLMo 2 13B"],
    "family": "OLMo",
    "shapes_from": "config.json of allenai/OLMo-2-1124-7B (hidden_size 4096, 32 heads, 32 kv "
                   "heads, rms_norm_eps 1e-6) and OLMo-2-1124-13B (hidden 5120, 40 heads)",
    "precision": "bf16",
    "description": "x (tokens, hidden) -> q = norm(x Wq^T) * wq, k = norm(x Wk^T) * wk, where norm "
                   "is RMS over the full hidden width in fp32, cast to bf16 before the weight.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 5, "hidden": 64}, "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 3, "hidden": 96}, "cpu": True, "visible": False},
        {"name": "decode_b32_7b", "params": {"tokens": 32, "hidden": 4096}},
        {"name": "prefill_4k_7b", "params": {"tokens": 4096, "hidden": 4096}},
        {"name": "prefill_4k_13b", "params": {"tokens": 4096, "hidden": 5120}, "visible": False},
        {"name": "decode_b1_13b", "params": {"tokens": 1, "hidden": 5120}, "visible": False},
    ],
    "flops": lambda p: 4 * p["tokens"] * p["hidden"] ** 2 + 8 * p["tokens"] * p["hidden"],
    "bytes": lambda p: 2 * (2 * p["hidden"] ** 2 + 3 * p["tokens"] * p["hidden"]),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.q_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(hidden, hidden, bias=False, dtype=dtype)
        self.q_norm = nn.Parameter((1 + 0.1 * torch.randn(hidden)).to(dtype))
        self.k_norm = nn.Parameter((1 + 0.1 * torch.randn(hidden)).to(dtype))
        for lin in (self.q_proj, self.k_proj):
            nn.init.normal_(lin.weight, std=hidden ** -0.5)
        self.eps = eps

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def forward(self, x: torch.Tensor):
        return self._norm(self.q_proj(x), self.q_norm), self._norm(self.k_proj(x), self.k_norm)


def get_inputs(tokens: int = 32, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 4096, dtype=torch.bfloat16):
    return [hidden, 1e-6, dtype]
