"""Dynamic per-token symmetric int8 quantization of activations (SmoothQuant W8A8 in vLLM).

Reference: vLLM's ``ref_dynamic_per_token_quant`` (what ``scaled_int8_quant`` computes with
no static scale); SmoothQuant's smoothing factors are already folded into the preceding
RMSNorm weight, so this sees plain activations.
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "int8_quant_per_token_smoothquant",
    "category": "quant",
    "models": ["Llama 3 8B W8A8 (SmoothQuant)"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672); "
                   "W8A8 SmoothQuant per-token scales",
    "precision": "int8",
    "description": "Per token: s = amax(|x|) / 127, q = clamp(round(x * 127 / amax), -128, 127) "
                   "as int8 (round half to even); returns q [tokens, hidden] and the fp32 scales "
                   "[tokens, 1].",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "hidden": 257}, "cpu": True},
        {"name": "decode_b64_8b", "params": {"tokens": 64, "hidden": 4096}},
        {"name": "prefill_8k_8b", "params": {"tokens": 8192, "hidden": 4096}},
        {"name": "prefill_4k_8b_down", "params": {"tokens": 4096, "hidden": 14336},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 509}, "cpu": True,
         "visible": False},
    ],
    # |x| and max (2), scale, round and clamp (3) per element
    "flops": lambda p: 5 * p["tokens"] * p["hidden"],
    # x read once (bf16), q written (int8), one fp32 scale per token written
    "bytes": lambda p: 3 * p["tokens"] * p["hidden"] + 4 * p["tokens"],
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        info = torch.iinfo(torch.int8)
        x_token_max, _ = x.abs().max(dim=-1)
        x_token_max = x_token_max.to(dtype=torch.float32)
        scales = (x_token_max / float(info.max))[:, None]
        iscales = (float(info.max) / x_token_max)[:, None]
        out = (x.to(torch.float32) * iscales).round().clamp(info.min, info.max).to(torch.int8)
        return out, scales


def get_inputs(tokens: int = 8192, hidden: int = 4096, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs():
    return []
