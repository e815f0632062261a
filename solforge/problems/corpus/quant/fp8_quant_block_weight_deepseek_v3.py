"""128x128 block FP8 e4m3 quantization of a weight matrix, DeepSeek-V3 style.

Reference: DeepGEMM's ``per_block_cast_to_fp8`` (the weight format of DeepSeek-V3's FP8
checkpoints and of its FP8 training recipe): one fp32 scale per 128x128 block, ragged
edge blocks padded with zeros.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "fp8_quant_block_weight_deepseek_v3",
    "category": "quant",
    "models": ["DeepSeek-V3"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "fp8",
    "description": "Quantize a bf16 weight [N, K] to float8_e4m3fn with one scale per 128x128 "
                   "block, s = max(amax, 1e-4) / 448; returns q [N, K] and the fp32 scales "
                   "[ceil(N/128), ceil(K/128)].",
    "workloads": [
        {"name": "cpu_small", "params": {"n": 257, "k": 509}, "cpu": True},
        {"name": "q_a_kv_a_proj", "params": {"n": 2112, "k": 7168}},
        {"name": "o_proj", "params": {"n": 7168, "k": 16384}},
        {"name": "dense_gate_up_proj", "params": {"n": 36864, "k": 7168}, "visible": False},
        {"name": "cpu_odd", "params": {"n": 131, "k": 1031}, "cpu": True, "visible": False},
    ],
    # |x| and max (2), scale and clamp (2) per element
    "flops": lambda p: 4 * p["n"] * p["k"],
    # w read once (bf16), q written (fp8), one fp32 scale per block written
    "bytes": lambda p: 3 * p["n"] * p["k"] + 4 * (-(-p["n"] // 128)) * (-(-p["k"] // 128)),
}

FP8 = torch.float8_e4m3fn


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


class Model(nn.Module):
    def __init__(self, block: int = 128):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor):
        b = self.block
        m, n = x.shape
        x_padded = torch.zeros((ceil_div(m, b) * b, ceil_div(n, b) * b), dtype=x.dtype,
                               device=x.device)
        x_padded[:m, :n] = x
        x_view = x_padded.view(-1, b, x_padded.size(1) // b, b)
        x_amax = x_view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
        x_scaled = (x_view * (448.0 / x_amax)).clamp(-448.0, 448.0).to(FP8)
        q = x_scaled.view_as(x_padded)[:m, :n].contiguous()
        return q, (x_amax / 448.0).view(x_view.size(0), x_view.size(2))


def get_inputs(n: int = 7168, k: int = 16384, dtype=torch.bfloat16):
    return [gen.randn(n, k, dtype=dtype, scale=0.02)]


def get_init_inputs():
    return [128]
