"""Dequantize gpt-oss's MXFP4 expert weights (HF integrations/mxfp4 convert_moe_packed_tensors):
each byte holds two FP4 e2m1 values (low nibble first), 32 values share one E8M0 scale
byte (a power of two, bias 127); w = FP4[code] * 2^(scale - 127), in bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "mxfp4_dequant_gpt_oss",
    "category": "quant",
    "models": ["gpt-oss 20B", "gpt-oss 120B"],
    "family": "gpt-oss",
    "shapes_from": "config.json of openai/gpt-oss-20b (hidden_size 2880, intermediate_size 2880, "
                   "num_local_experts 32; gate_up_proj 2880 -> 5760 per expert) and gpt-oss-120b "
                   "(128 experts); quantization_config quant_method mxfp4 (32-element blocks)",
    "precision": "bf16",
    "description": "blocks (rows, G, 16) uint8, scales (rows, G) uint8 -> (rows, G * 32) bf16.",
    "workloads": [
        {"name": "cpu_small", "params": {"rows": 8, "groups": 4}, "cpu": True},
        {"name": "cpu_odd", "params": {"rows": 5, "groups": 3}, "cpu": True, "visible": False},
        {"name": "gate_up_one_expert_20b", "params": {"rows": 5760, "groups": 90}},
        {"name": "gate_up_all_experts_20b", "params": {"rows": 32 * 5760, "groups": 90}},
        {"name": "down_8_experts_120b", "params": {"rows": 8 * 2880, "groups": 90},
         "visible": False},
    ],
    "flops": lambda p: p["rows"] * p["groups"] * 32,
    "bytes": lambda p: p["rows"] * p["groups"] * (16 + 1 + 64),
}

FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("lut", torch.tensor(FP4, dtype=torch.bfloat16))

    def forward(self, blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        lo, hi = (blocks & 0x0F).long(), (blocks >> 4).long()
        vals = torch.stack((self.lut[lo], self.lut[hi]), dim=-1).flatten(-2)  # (rows, G, 32)
        exp = scales.to(torch.int32) - 127
        out = torch.ldexp(vals.float(), exp[..., None].float())
        return out.flatten(-2).to(torch.bfloat16)


def get_inputs(rows: int = 5760, groups: int = 90):
    blocks = gen.indices(256, rows, groups, 16, dtype=torch.int32).to(torch.uint8)
    # trained expert weights: block scales around 2^-6 .. 2^-2
    scales = (121 + gen.indices(5, rows, groups, dtype=torch.int32)).to(torch.uint8)
    return [blocks, scales]


def get_init_inputs():
    return []
