"""int8 W8A8 GEMM with per-token activation and per-channel weight scales (SmoothQuant), bf16 out.

Reference: vLLM's ``baseline_scaled_mm`` (the check for cutlass_scaled_mm): the int8
product summed in fp32 (int8 values are exact there), then scaled per row and per column.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "int8_gemm_w8a8_smoothquant",
    "category": "quant",
    "models": ["Llama 3 8B W8A8 (SmoothQuant)"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672); "
                   "W8A8 SmoothQuant (per-token activation, per-channel weight scales)",
    "precision": "int8",
    "description": "y = s_x * (s_w^T * (x_q @ W_q^T)) in bf16 for int8 x_q [M, K] with per-token "
                   "scales s_x [M, 1] and int8 W_q [N, K] with per-channel scales s_w [N, 1] "
                   "(vLLM CompressedTensorsW8A8Int8, cutlass_scaled_mm).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "in_features": 257, "out_features": 509},
         "cpu": True},
        {"name": "decode_m64_qkv",
         "params": {"tokens": 64, "in_features": 4096, "out_features": 6144}},
        {"name": "prefill_m4096_gate_up",
         "params": {"tokens": 4096, "in_features": 4096, "out_features": 28672}},
        {"name": "decode_m1_gate_up",
         "params": {"tokens": 1, "in_features": 4096, "out_features": 28672}, "visible": False},
        {"name": "prefill_m2048_down",
         "params": {"tokens": 2048, "in_features": 14336, "out_features": 4096},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "in_features": 509, "out_features": 131},
         "cpu": True, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["in_features"] * p["out_features"],
    # x_q and W_q read (int8), scales read (fp32), y written (bf16)
    "bytes": lambda p: (p["tokens"] * p["in_features"] + p["out_features"] * p["in_features"]
                        + 4 * (p["tokens"] + p["out_features"])
                        + 2 * p["tokens"] * p["out_features"]),
}


def _quant_per_row(x: torch.Tensor):
    """Symmetric int8 with one fp32 scale per row (tokens for x, output channels for W)."""
    amax = x.abs().amax(dim=-1, keepdim=True).float()
    q = (x.float() * (127.0 / amax)).round().clamp(-128, 127).to(torch.int8)
    return q, amax / 127.0


class Model(nn.Module):
    def __init__(self, in_features: int = 4096, out_features: int = 28672):
        super().__init__()
        q, scale = _quant_per_row(0.02 * torch.randn(out_features, in_features))
        self.weight = nn.Parameter(q, requires_grad=False)
        self.weight_scale = nn.Parameter(scale, requires_grad=False)  # [N, 1]

    def forward(self, x_q: torch.Tensor, x_scale: torch.Tensor) -> torch.Tensor:
        acc = torch.mm(x_q.to(torch.float32), self.weight.to(torch.float32).t())
        return (x_scale * (self.weight_scale.t() * acc)).to(torch.bfloat16)


def get_inputs(tokens: int = 4096, in_features: int = 4096):
    return list(_quant_per_row(gen.randn(tokens, in_features, dtype=torch.bfloat16)))


def get_init_inputs(in_features: int = 4096, out_features: int = 28672):
    return [in_features, out_features]
