"""Block-scaled FP8 e4m3 GEMM of DeepSeek-V3 (1x128 activation groups, 128x128 weight blocks).

Reference: dequantize both operands to fp32 and multiply, bf16 out; DeepGEMM's
gemm_fp8_fp8_bf16_nt and DeepSeek-V3's Triton fp8_gemm compute the same. Shapes are the
(N, K) pairs of DeepSeek-V3's linear layers that DeepGEMM benchmarks.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "fp8_gemm_block_deepseek_v3",
    "category": "quant",
    "models": ["DeepSeek-V3"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "fp8",
    "description": "y = dequant(x_q, s_x) @ dequant(W_q, s_w)^T in bf16: x_q [M, K] e4m3 with one "
                   "fp32 scale per token per 128 columns, W_q [N, K] e4m3 with one per 128x128 "
                   "block (ragged N edges allowed).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "in_features": 384, "out_features": 257},
         "cpu": True},
        {"name": "decode_m64_q_a_kv_a",
         "params": {"tokens": 64, "in_features": 7168, "out_features": 2112}},
        {"name": "prefill_m4096_q_b",
         "params": {"tokens": 4096, "in_features": 1536, "out_features": 24576}},
        {"name": "decode_m128_o_proj",
         "params": {"tokens": 128, "in_features": 16384, "out_features": 7168},
         "visible": False},
        {"name": "prefill_m4096_o_proj",
         "params": {"tokens": 4096, "in_features": 16384, "out_features": 7168},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "in_features": 640, "out_features": 509},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["in_features"] * p["out_features"],
    # x_q and W_q read (fp8), their fp32 scales read, y written (bf16)
    "bytes": lambda p: (p["tokens"] * p["in_features"] + p["out_features"] * p["in_features"]
                        + 4 * p["tokens"] * (p["in_features"] // 128)
                        + 4 * (-(-p["out_features"] // 128)) * (p["in_features"] // 128)
                        + 2 * p["tokens"] * p["out_features"]),
}

FP8 = torch.float8_e4m3fn
BLOCK = 128


def _quant_weight_blocks(w: torch.Tensor):
    """128x128 block quantization (DeepGEMM per_block_cast_to_fp8)."""
    n, k = w.shape
    nb, kb = -(-n // BLOCK), -(-k // BLOCK)
    padded = torch.zeros(nb * BLOCK, kb * BLOCK, dtype=torch.float32)
    padded[:n, :k] = w.float()
    view = padded.view(nb, BLOCK, kb, BLOCK)
    amax = view.abs().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    q = (view * (448.0 / amax)).clamp(-448.0, 448.0).to(FP8).view(nb * BLOCK, kb * BLOCK)
    return q[:n, :k].contiguous(), (amax / 448.0).view(nb, kb)


def _quant_act_groups(x: torch.Tensor):
    """1x128 per-token-group quantization (DeepSeek-V3 act_quant)."""
    m, k = x.shape
    g = x.float().view(m, k // BLOCK, BLOCK)
    s = g.abs().amax(dim=-1, keepdim=True).clamp(min=1e-10) / 448.0
    q = (g / s).clamp(-448.0, 448.0).to(FP8).view(m, k)
    return q, s.view(m, k // BLOCK)


class Model(nn.Module):
    def __init__(self, in_features: int = 16384, out_features: int = 7168):
        super().__init__()
        q, s = _quant_weight_blocks(0.02 * torch.randn(out_features, in_features))
        self.weight = nn.Parameter(q, requires_grad=False)
        self.weight_scale_inv = nn.Parameter(s, requires_grad=False)  # DeepSeek's name

    def forward(self, x_q: torch.Tensor, x_scale: torch.Tensor) -> torch.Tensor:
        n, k = self.weight.shape
        x = x_q.to(torch.float32) * x_scale.repeat_interleave(BLOCK, dim=1)
        s_w = self.weight_scale_inv.repeat_interleave(BLOCK, dim=0)[:n]
        w = self.weight.to(torch.float32) * s_w.repeat_interleave(BLOCK, dim=1)[:, :k]
        return torch.matmul(x, w.t()).to(torch.bfloat16)


def get_inputs(tokens: int = 4096, in_features: int = 16384):
    return list(_quant_act_groups(gen.randn(tokens, in_features, dtype=torch.bfloat16)))


def get_init_inputs(in_features: int = 16384, out_features: int = 7168):
    return [in_features, out_features]
