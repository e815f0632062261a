"""Dequantize an AWQ int4 weight (AutoAWQ's GEMM layout, what awq_dequantize / vLLM's
AWQ dequant kernel undo): eight 4-bit values packed per int32 along the output dimension in
AWQ's interleaved order [0, 2, 4, 6, 1, 3, 5, 7], zero points packed the same way, one fp16
scale and zero per group of 128 input rows; w = (q - z) * s as an (in, out) fp16 matrix."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "awq_dequant_int4_mistral",
    "category": "quant",
    "models": ["Mistral 7B Instruct AWQ", "Llama 3 8B AWQ"],
    "family": "Mistral",
    "shapes_from": "config.json of mistralai/Mistral-7B-Instruct-v0.2 (hidden 4096, intermediate "
                   "14336, 8 kv heads of 128) with AutoAWQ's quant_config (w_bit 4, q_group_size "
                   "128, zero_point true, version gemm)",
    "precision": "fp16",
    "description": "qweight (K, N/8) int32, qzeros (K/g, N/8) int32, scales (K/g, N) fp16 -> "
                   "W (K, N) fp16 = (unpack(qweight) - unpack(qzeros)[k // g]) * scales[k // g].",
    "workloads": [
        {"name": "cpu_small", "params": {"k": 64, "n": 32, "group": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"k": 96, "n": 16, "group": 32}, "cpu": True,
         "visible": False},
        {"name": "qkv_proj", "params": {"k": 4096, "n": 6144, "group": 128}},
        {"name": "gate_up_proj", "params": {"k": 4096, "n": 28672, "group": 128}},
        {"name": "down_proj", "params": {"k": 14336, "n": 4096, "group": 128}, "visible": False},
    ],
    "flops": lambda p: 2 * p["k"] * p["n"],
    # packed int4 weight and zeros, fp16 scales in; fp16 weight out
    "bytes": lambda p: p["k"] * p["n"] / 2 + 2 * p["k"] * p["n"]
    + (p["k"] // p["group"]) * p["n"] * (2 + 0.5),
}

AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]
_AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def _unpack(packed: torch.Tensor) -> torch.Tensor:
    shifts = torch.arange(0, 32, 4, device=packed.device)
    nib = (packed[..., None] >> shifts) & 0xF  # (rows, N/8, 8) in packed order
    return nib[..., AWQ_REVERSE_ORDER].reshape(packed.shape[0], -1)


def _pack(nibbles: torch.Tensor) -> torch.Tensor:
    """(rows, N) values in [0, 16) -> (rows, N/8) int32 in AWQ's order."""
    v = nibbles.view(nibbles.shape[0], -1, 8)[..., _AWQ_ORDER].to(torch.int64)
    packed = (v << torch.arange(0, 32, 4)).sum(-1)
    return torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed).to(torch.int32)


class Model(nn.Module):
    def __init__(self, group: int = 128):
        super().__init__()
        self.group = group

    def forward(self, qweight, qzeros, scales):
        w = _unpack(qweight)
        z = _unpack(qzeros).repeat_interleave(self.group, dim=0)
        s = scales.repeat_interleave(self.group, dim=0)
        return (w - z).to(torch.float16) * s


def get_inputs(k: int = 4096, n: int = 6144, group: int = 128):
    qweight = _pack(gen.indices(16, k, n))
    qzeros = _pack(gen.indices(16, k // group, n))
    scales = gen.positive(k // group, n, low=0.002, high=0.02, dtype=torch.float16)
    return [qweight, qzeros, scales]


def get_init_inputs(group: int = 128):
    return [group]
