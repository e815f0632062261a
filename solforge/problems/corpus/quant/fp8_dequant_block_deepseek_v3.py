"""Dequantize a 128x128 block-scaled FP8 e4m3 weight to bf16, DeepSeek-V3's weight_dequant.

DeepSeek-V3's inference code runs this when it has no FP8 GEMM (gemm_impl="bf16") and to
convert its FP8 checkpoint to bf16. The inputs are a real block-quantized weight: a bf16-like
weight quantized here with the checkpoint's recipe (scale = block amax / 448).
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "fp8_dequant_block_deepseek_v3",
    "category": "quant",
    "models": ["DeepSeek-V3"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "bf16",
    "description": "y = q.float() * s[i // 128, j // 128] cast to bf16, for an e4m3 weight "
                   "q [N, K] and its fp32 block scales s [ceil(N/128), ceil(K/128)] (ragged "
                   "edges allowed).",
    "workloads": [
        {"name": "cpu_small", "params": {"n": 257, "k": 509}, "cpu": True},
        {"name": "q_a_kv_a_proj", "params": {"n": 2112, "k": 7168}},
        {"name": "o_proj", "params": {"n": 7168, "k": 16384}},
        {"name": "dense_gate_up_proj", "params": {"n": 36864, "k": 7168}, "visible": False},
        {"name": "cpu_odd", "params": {"n": 131, "k": 1031}, "cpu": True, "visible": False},
    ],
    # one product per element
    "flops": lambda p: p["n"] * p["k"],
    # q read (fp8), scales read (fp32), y written (bf16)
    "bytes": lambda p: 3 * p["n"] * p["k"] + 4 * (-(-p["n"] // 128)) * (-(-p["k"] // 128)),
}

FP8 = torch.float8_e4m3fn


class Model(nn.Module):
    def __init__(self, block: int = 128):
        super().__init__()
        self.block = block

    def forward(self, q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        n, k = q.shape
        s_full = s.repeat_interleave(self.block, dim=0)[:n].repeat_interleave(self.block, dim=1)
        return (q.to(torch.float32) * s_full[:, :k]).to(torch.bfloat16)


def _block_quant(w: torch.Tensor, b: int = 128):
    """128x128 block quantization (DeepGEMM per_block_cast_to_fp8)."""
    n, k = w.shape
    nb, kb = -(-n // b), -(-k // b)
    padded = torch.zeros(nb * b, kb * b, dtype=torch.float32)
    padded[:n, :k] = w.float()
    view = padded.view(nb, b, kb, b)
    amax = view.abs().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    q = (view * (448.0 / amax)).clamp(-448.0, 448.0).to(FP8).view(nb * b, kb * b)
    return q[:n, :k].contiguous(), (amax / 448.0).view(nb, kb)


def get_inputs(n: int = 7168, k: int = 16384):
    return list(_block_quant(gen.randn(n, k, dtype=torch.bfloat16, scale=0.02)))


def get_init_inputs():
    return [128]
