"""DeepSeek-V3's MoE combine backward: experts' outputs sit in expert-sorted order (T x 8 rows)
and each token gathers its 8 through a permutation, weighted by normalised sigmoid scores and
the routed scaling factor 2.5; the gradient scatters back to the sorted rows; bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "moe_combine_bwd_deepseek_v3",
    "category": "L2",
    "direction": "backward",
    "family": "DeepSeek-V3",
    "models": ["DeepSeek-V3"],
    "shapes_from": "deepseek-ai/DeepSeek-V3 config.json: hidden_size 7168, n_routed_experts "
                   "256, num_experts_per_tok 8, routed_scaling_factor 2.5, norm_topk_prob true",
    "precision": "bf16_grad",
    "description": "Backward of y[t] = 2.5 * sum_k w[t, k] * E[pos[t, k]], E (T*K, H) the "
                   "experts' outputs in expert-sorted order and pos (T, K) each token's rows in "
                   "it (a permutation of T*K). Inputs grad_y (T, H), E, w (T, K) (rows summing to "
                   "one), pos. Returns dE (T*K, H) with dE[pos[t, k]] = 2.5 * w[t, k] * grad_y[t] "
                   "and dw[t, k] = 2.5 * <grad_y[t], E[pos[t, k]]>.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 6, "hidden": 32, "top_k": 4}, "cpu": True},
        {"name": "train_4k", "params": {"tokens": 4096, "hidden": 7168, "top_k": 8}},
        {"name": "train_8k", "params": {"tokens": 8192, "hidden": 7168, "top_k": 8}},
        {"name": "train_16k", "params": {"tokens": 16384, "hidden": 7168, "top_k": 8},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 40, "top_k": 8}, "cpu": True,
         "visible": False},
    ],
    "flops": lambda p: 4 * p["tokens"] * p["top_k"] * p["hidden"],
    # grad_y read, E read and dE written (bf16), w, pos and dw
    "bytes": lambda p: 2 * p["tokens"] * p["hidden"] * (1 + 2 * p["top_k"])
    + 12 * p["tokens"] * p["top_k"],
}

SCALE = 2.5


class Model(nn.Module):
    def forward(self, grad_y, expert_out, weights, pos):
        g = grad_y.float() * SCALE
        gathered = expert_out[pos].float()                      # (T, K, H)
        dw = (gathered * g[:, None, :]).sum(-1)
        de = torch.empty_like(expert_out)
        de[pos.reshape(-1)] = (weights.float()[..., None] * g[:, None, :]).reshape(
            -1, g.shape[1]).to(expert_out.dtype)
        return de, dw.to(weights.dtype)


def autograd_forward(model, grad_y, expert_out, weights, pos):
    """The forward this problem differentiates (tests/problems/test_backward.py)."""
    return ((lambda e, w: SCALE * (w[..., None] * e[pos]).sum(1)), [expert_out, weights],
            [grad_y])


def get_inputs(tokens: int = 4096, hidden: int = 7168, top_k: int = 8, dtype=torch.bfloat16):
    pos = gen.permutation(tokens * top_k).reshape(tokens, top_k)
    return [gen.randn(tokens, hidden, dtype=dtype),
            gen.randn(tokens * top_k, hidden, dtype=dtype),
            gen.probs(tokens, top_k, dim=-1, scale=1.0, dtype=dtype), pos]


def get_init_inputs():
    return []
