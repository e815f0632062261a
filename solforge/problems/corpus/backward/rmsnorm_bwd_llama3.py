"""RMSNorm backward as Llama 3 trains it (hidden 4096 for 8B, 8192 for 70B): dx and dweight
from the upstream gradient, bf16 data, fp32 math."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "rmsnorm_bwd_llama3",
    "category": "L1",
    "direction": "backward",
    "family": "Llama 3",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "shapes_from": "meta-llama/Meta-Llama-3-8B and -70B config.json: hidden_size 4096 / 8192, "
                   "rms_norm_eps 1e-5; tokens = micro-batch x sequence (2x2048 ... 2x8192)",
    "precision": "bf16_grad",
    "description": "Backward of y = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps) (HF "
                   "LlamaRMSNorm, fp32 math): inputs grad_out, x and the saved fp32 rstd (as "
                   "fused kernels save it); returns dx = rstd * (g*w - xhat * mean(g*w*xhat)) "
                   "and dweight = sum over tokens of g * xhat.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 7, "hidden": 257}, "cpu": True},
        {"name": "train_4k_8b", "params": {"tokens": 4096, "hidden": 4096}},
        {"name": "train_8k_8b", "params": {"tokens": 8192, "hidden": 4096}},
        {"name": "train_16k_70b", "params": {"tokens": 16384, "hidden": 8192}, "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 33, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    # per element: xhat, g*w, the dot, dx (3), dweight's multiply-add
    "flops": lambda p: 9 * p["tokens"] * p["hidden"],
    # grad_out and x read, dx written (bf16), rstd read (fp32), w read and dweight written
    "bytes": lambda p: 6 * p["tokens"] * p["hidden"] + 4 * p["tokens"] + 4 * p["hidden"],
}


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, dtype=torch.bfloat16):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=torch.float32).to(dtype))

    def forward(self, grad_out: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor):
        g = grad_out.float()
        xhat = x.float() * rstd
        dxhat = g * self.weight.float()
        dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdim=True))
        dweight = (g * xhat).sum(0)
        return dx.to(x.dtype), dweight.to(self.weight.dtype)


def autograd_forward(model, grad_out, x, rstd, eps: float = 1e-5):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    def fn(x, w):
        return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return fn, [x, model.weight], [grad_out]


def get_inputs(tokens: int = 8192, hidden: int = 4096, dtype=torch.bfloat16):
    x = gen.randn(tokens, hidden, dtype=dtype)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)  # saved by the forward
    return [gen.randn(tokens, hidden, dtype=dtype), x, rstd]


def get_init_inputs(hidden: int = 4096, dtype=torch.bfloat16):
    return [hidden, dtype]
