"""The QKV projection's backward in a Llama 3 block (x @ W^T with W (6144, 4096) for 8B: 32 query
heads and 2 x 8 k/v heads of 128): dx = dy W and dW = dy^T x; bf16 GEMMs, fp32 accumulation."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "linear_bwd_llama3_qkv",
    "category": "L1",
    "direction": "backward",
    "family": "Llama 3",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "shapes_from": "meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, 32 heads + 2 x "
                   "8 k/v heads of 128 (q/k/v fused: 6144); 70B at tensor parallelism 8: "
                   "hidden 8192, (64 + 2 x 8) x 128 / 8 = 1280 outputs per GPU",
    "precision": "bf16_grad",
    "description": "Backward of y = x W^T (no bias): inputs grad_out (T, N), x (T, K), W (N, "
                   "K); returns dx = grad_out W (T, K) and dW = grad_out^T x (N, K), the latter "
                   "a sum over all T tokens (SOL-ExecBench's linear_backward convention).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 24, "k": 64, "n": 96}, "cpu": True},
        {"name": "train_4k_8b", "params": {"tokens": 4096, "k": 4096, "n": 6144}},
        {"name": "train_16k_8b", "params": {"tokens": 16384, "k": 4096, "n": 6144}},
        {"name": "train_8k_70b_tp8", "params": {"tokens": 8192, "k": 8192, "n": 1280},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 37, "k": 80, "n": 120}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 4 * p["tokens"] * p["k"] * p["n"],
    # grad_out, x, W read; dx, dW written (bf16)
    "bytes": lambda p: 2 * (p["tokens"] * p["n"] + 2 * p["tokens"] * p["k"] + 2 * p["n"] * p["k"]),
}


class Model(nn.Module):
    def forward(self, grad_out, x, weight):
        return grad_out @ weight, grad_out.t() @ x


def autograd_forward(model, grad_out, x, weight):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return (lambda x, w: x @ w.t()), [x, weight], [grad_out]


def get_inputs(tokens: int = 4096, k: int = 4096, n: int = 6144, dtype=torch.bfloat16):
    return [gen.randn(tokens, n, dtype=dtype), gen.randn(tokens, k, dtype=dtype),
            gen.randn(n, k, dtype=dtype, scale=k ** -0.5)]


def get_init_inputs():
    return []
