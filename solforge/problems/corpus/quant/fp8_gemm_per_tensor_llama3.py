"""FP8 e4m3 GEMM with per-tensor scales (W8A8-FP8 linear of Llama 3 FP8 in vLLM), bf16 out.

Reference: dequantize both operands to fp32 and multiply (torch._scaled_mm computes the
same on CUDA, but the reference must run anywhere). The weight is quantized once in
__init__ with one scale; the activation comes quantized per tensor, as vLLM hands it over.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "fp8_gemm_per_tensor_llama3",
    "category": "quant",
    "models": ["Llama 3 8B FP8", "Llama 3 70B FP8"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672); "
                   "per-tensor FP8 checkpoints (neuralmagic Meta-Llama-3-8B-Instruct-FP8)",
    "precision": "fp8",
    "description": "y = (x_q * s_x) @ (W_q * s_w)^T in bf16 for e4m3 x_q [M, K], W_q [N, K] and "
                   "fp32 per-tensor scales s_x, s_w [1] (vLLM Fp8LinearMethod, cutlass_scaled_mm).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "in_features": 257, "out_features": 509},
         "cpu": True},
        {"name": "decode_m64_8b_qkv",
         "params": {"tokens": 64, "in_features": 4096, "out_features": 6144}},
        {"name": "prefill_m4096_8b_gate_up",
         "params": {"tokens": 4096, "in_features": 4096, "out_features": 28672}},
        {"name": "decode_m1_70b_down",
         "params": {"tokens": 1, "in_features": 28672, "out_features": 8192}, "visible": False},
        {"name": "prefill_m2048_70b_qkv",
         "params": {"tokens": 2048, "in_features": 8192, "out_features": 10240},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "in_features": 509, "out_features": 131},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["in_features"] * p["out_features"],
    # x_q and W_q read (fp8), y written (bf16), two scales
    "bytes": lambda p: (p["tokens"] * p["in_features"] + p["out_features"] * p["in_features"]
                        + 2 * p["tokens"] * p["out_features"] + 8),
}

FP8 = torch.float8_e4m3fn


def _quant_per_tensor(x: torch.Tensor):
    scale = x.abs().max().float() / 448.0
    q = (x.float() / scale).clamp(-448.0, 448.0).to(FP8)
    return q, scale.view(1)


class Model(nn.Module):
    def __init__(self, in_features: int = 4096, out_features: int = 28672):
        super().__init__()
        q, scale = _quant_per_tensor(0.02 * torch.randn(out_features, in_features))
        self.weight = nn.Parameter(q, requires_grad=False)
        self.weight_scale = nn.Parameter(scale, requires_grad=False)

    def forward(self, x_q: torch.Tensor, x_scale: torch.Tensor) -> torch.Tensor:
        x = x_q.to(torch.float32) * x_scale
        w = self.weight.to(torch.float32) * self.weight_scale
        return torch.matmul(x, w.t()).to(torch.bfloat16)


def get_inputs(tokens: int = 4096, in_features: int = 4096):
    return list(_quant_per_tensor(gen.randn(tokens, in_features, dtype=torch.bfloat16)))


def get_init_inputs(in_features: int = 4096, out_features: int = 28672):
    return [in_features, out_features]
