"""Dequantize a bitsandbytes NF4 weight (QLoRA's 4-bit NormalFloat, what
bnb.functional.dequantize_4bit computes, without double quantization): two 4-bit codes per
byte (high nibble first), each code looks up the 16-entry NF4 table, times the fp32 absmax of
its block of 64 consecutive elements; the (out, in) weight comes back in bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "nf4_dequant_qlora_llama2",
    "category": "quant",
    "models": ["Llama 2 7B (QLoRA NF4)", "Llama 2 13B (QLoRA NF4)"],
    "family": "Llama 2",
    "shapes_from": "config.json of meta-llama/Llama-2-7b-hf (hidden 4096, intermediate 11008) and "
                   "Llama-2-13b-hf (5120, 13824) with BitsAndBytesConfig(load_in_4bit, "
                   "bnb_4bit_quant_type nf4, blocksize 64, compute dtype bf16)",
    "precision": "bf16",
    "description": "packed (out * in / 2,) uint8, absmax (out * in / 64,) fp32 -> W (out, in) "
                   "bf16 = "
                   "NF4[code] * absmax[i // 64].",
    "workloads": [
        {"name": "cpu_small", "params": {"out_features": 16, "in_features": 64}, "cpu": True},
        {"name": "cpu_odd", "params": {"out_features": 8, "in_features": 96}, "cpu": True,
         "visible": False},
        {"name": "q_proj_7b", "params": {"out_features": 4096, "in_features": 4096}},
        {"name": "gate_proj_7b", "params": {"out_features": 11008, "in_features": 4096}},
        {"name": "down_proj_13b", "params": {"out_features": 5120, "in_features": 13824},
         "visible": False},
    ],
    "flops": lambda p: p["out_features"] * p["in_features"],
    "bytes": lambda p: p["out_features"] * p["in_features"] * (0.5 + 2 + 4 / 64),
}

NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
       -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
       0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
       0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


class Model(nn.Module):
    def __init__(self, out_features: int = 4096, in_features: int = 4096):
        super().__init__()
        self.out_features, self.in_features = out_features, in_features
        self.register_buffer("table", torch.tensor(NF4, dtype=torch.float32))

    def forward(self, packed: torch.Tensor, absmax: torch.Tensor) -> torch.Tensor:
        codes = torch.stack(((packed >> 4) & 0xF, packed & 0xF), dim=-1).view(-1).long()
        w = self.table[codes].view(-1, 64) * absmax[:, None]
        return w.view(self.out_features, self.in_features).to(torch.bfloat16)


def get_inputs(out_features: int = 4096, in_features: int = 4096):
    n = out_features * in_features
    packed = gen.indices(256, n // 2, dtype=torch.int32).to(torch.uint8)
    absmax = gen.positive(n // 64, low=0.01, high=0.1)
    return [packed, absmax]


def get_init_inputs(out_features: int = 4096, in_features: int = 4096):
    return [out_features, in_features]
