"""Dynamic per-tensor FP8 (e4m3) quantization of activations, Llama 3 FP8 as vLLM serves it.

Reference: vLLM's ``ref_dynamic_per_tensor_fp8_quant`` (what ``scaled_fp8_quant`` computes
when no static scale is given): scale = amax / 448, q = clamp(x / scale) cast to e4m3.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "fp8_quant_per_tensor_llama3",
    "category": "quant",
    "models": ["Llama 3 8B FP8", "Llama 3 70B FP8"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672); "
                   "per-tensor FP8 checkpoints",
    "precision": "fp8",
    "description": "Quantize bf16 activations [tokens, hidden] to float8_e4m3fn with one fp32 "
                   "scale = amax(|x|) / 448 for the whole tensor; returns (q, scale[1]) as the "
                   "input of an FP8 linear layer.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "hidden": 257}, "cpu": True},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "hidden": 4096}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "hidden": 4096}},
        {"name": "prefill_4k_8b_down", "params": {"tokens": 4096, "hidden": 14336},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    # |x| and max (2), scale and clamp (2) per element
    "flops": lambda p: 4 * p["tokens"] * p["hidden"],
    # x read once (bf16), q written (fp8), the scale written
    "bytes": lambda p: 3 * p["tokens"] * p["hidden"] + 4,
}

FP8 = torch.float8_e4m3fn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        finfo = torch.finfo(FP8)
        one = torch.tensor(1.0, dtype=torch.float32, device=x.device)
        x_max = x.abs().max().to(torch.float32)
        scale = x_max / finfo.max
        iscale = one / scale
        out = (x.to(torch.float32) * iscale).clamp(min=finfo.min, max=finfo.max).to(FP8)
        return out, scale.view((1,))


def get_inputs(tokens: int = 8192, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs():
    return []
