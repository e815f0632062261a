"""Mixtral's MoE combine backward (each token's output the routing-weighted sum of its top-2
experts' outputs, hidden 4096): the experts' output gradients and the routing weights' gradients;
bf16, fp32 dot products."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_combine_bwd_mixtral",
    "category": "L2",
    "direction": "backward",
    "family": "Mixtral",
    "models": ["Mixtral 8x7B", "Mixtral 8x22B"],
    "shapes_from": "mistralai/Mixtral-8x7B-v0.1 config.json: hidden_size 4096, "
                   "num_local_experts 8, num_experts_per_tok 2; Mixtral-8x22B: hidden 6144",
    "precision": "bf16_grad",
    "description": "Backward of y[t] = sum_k w[t, k] * e[t, k] (MixtralSparseMoeBlock's combine, "
                   "experts' outputs gathered per token): inputs grad_y (T, H), e (T, K, H) and "
                   "the routing weights w (T, K) (softmax over the top-2 logits, rows summing to "
                   "one); returns de[t, k] = w[t, k] * grad_y[t] and dw[t, k] = <grad_y[t], "
                   "e[t, k]> (fp32 dot, bf16 result).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 9, "hidden": 64}, "cpu": True},
        {"name": "train_4k_8x7b", "params": {"tokens": 4096, "hidden": 4096}},
        {"name": "train_16k_8x7b", "params": {"tokens": 16384, "hidden": 4096}},
        {"name": "train_8k_8x22b", "params": {"tokens": 8192, "hidden": 6144},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 31, "hidden": 72}, "cpu": True,
         "visible": False},
    ],
    # per (token, k, element): one product for de, one multiply-add for dw
    "flops": lambda p: 3 * p["tokens"] * 2 * p["hidden"],
    # grad_y read, e read and de written (bf16), w read and dw written
    "bytes": lambda p: 2 * p["tokens"] * p["hidden"] * (1 + 2 * 2) + 8 * p["tokens"],
}

TOP_K = 2


class Model(nn.Module):
    def forward(self, grad_y, expert_out, weights):
        g = grad_y.float()
        de = weights.float()[..., None] * g[:, None, :]
        dw = (expert_out.float() * g[:, None, :]).sum(-1)
        return de.to(expert_out.dtype), dw.to(weights.dtype)


def autograd_forward(model, grad_y, expert_out, weights):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return (lambda e, w: (w[..., None] * e).sum(1)), [expert_out, weights], [grad_y]


def get_inputs(tokens: int = 4096, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype),
            gen.randn(tokens, TOP_K, hidden, dtype=dtype),
            gen.probs(tokens, TOP_K, dim=-1, scale=1.0, dtype=dtype)]


def get_init_inputs():
    return []
