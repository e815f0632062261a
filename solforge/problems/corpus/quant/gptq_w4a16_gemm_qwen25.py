"""A W4A16 GEMM with a GPTQ int4 weight (AutoGPTQ / exllama layout, desc_act false): eight
4-bit values packed per int32 along the input dimension (sequential order), zero points
packed along the output dimension and stored minus one (GPTQ v1), fp16 scales per group of
128 input rows; y = x @ ((q - (z + 1)) * s); fp16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "gptq_w4a16_gemm_qwen25",
    "category": "quant",
    "models": ["Qwen2.5 7B Instruct GPTQ-Int4", "Qwen2.5 72B Instruct GPTQ-Int4"],
    "family": "Qwen2.5",
    "shapes_from": "config.json of Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4 (hidden 3584, intermediate "
                   "18944; quantization_config bits 4, group_size 128, desc_act false, sym true) "
                   "and Qwen2.5-72B-Instruct-GPTQ-Int4 (hidden 8192, intermediate 29568 padded "
                   "to 29696 so that TP 8 shards of 3712 hold whole groups of 128)",
    "precision": "fp16",
    "description": "x (tokens, K) fp16, qweight (K/8, N) int32, qzeros (K/g, N/8) int32, scales "
                   "(K/g, N) fp16 -> y (tokens, N) fp16.",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 3, "k": 64, "n": 32, "group": 32},
         "cpu": True},
        {"name": "cpu_odd", "params": {"tokens": 5, "k": 96, "n": 16, "group": 32}, "cpu": True,
         "visible": False},
        {"name": "decode_m1_gate_up_7b", "params": {"tokens": 1, "k": 3584, "n": 37888,
                                                    "group": 128}},
        {"name": "decode_m16_down_7b", "params": {"tokens": 16, "k": 18944, "n": 3584,
                                                  "group": 128}},
        {"name": "prefill_m2048_gate_up_7b", "params": {"tokens": 2048, "k": 3584, "n": 37888,
                                                        "group": 128}, "visible": False},
        {"name": "decode_m64_down_72b_tp8", "params": {"tokens": 64, "k": 3712, "n": 8192,
                                                       "group": 128}, "visible": False},
    ],
    "flops": lambda p: 2 * p["tokens"] * p["k"] * p["n"],
    "bytes": lambda p: p["k"] * p["n"] / 2 + 2 * (p["k"] // p["group"]) * p["n"]
    + 2 * p["tokens"] * (p["k"] + p["n"]),
}


def _pack_rows(v: torch.Tensor) -> torch.Tensor:
    """(K, N) in [0, 16) -> (K/8, N) int32: row 8i + j in bits 4j..4j+3 of packed row i."""
    v = v.view(-1, 8, v.shape[1]).to(torch.int64)
    packed = (v << (4 * torch.arange(8))[None, :, None]).sum(1)
    return torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed).to(torch.int32)


def _pack_cols(v: torch.Tensor) -> torch.Tensor:
    """(R, N) in [0, 16) -> (R, N/8) int32: column 8i + j in bits 4j..4j+3 of packed column i."""
    v = v.view(v.shape[0], -1, 8).to(torch.int64)
    packed = (v << (4 * torch.arange(8))).sum(-1)
    return torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed).to(torch.int32)


class Model(nn.Module):
    def __init__(self, group: int = 128):
        super().__init__()
        self.group = group

    def forward(self, x, qweight, qzeros, scales):
        shifts = 4 * torch.arange(8, device=x.device)
        w = ((qweight[:, None, :] >> shifts[None, :, None]) & 0xF).reshape(-1, qweight.shape[1])
        z = ((qzeros[..., None] >> shifts) & 0xF).reshape(qzeros.shape[0], -1) + 1
        z = z.repeat_interleave(self.group, dim=0)
        s = scales.repeat_interleave(self.group, dim=0)
        return x @ ((w - z).to(torch.float16) * s)


def get_inputs(tokens: int = 1, k: int = 3584, n: int = 37888, group: int = 128):
    x = gen.randn(tokens, k, dtype=torch.float16)
    qweight = _pack_rows(gen.indices(16, k, n))
    qzeros = _pack_cols(torch.full((k // group, n), 7))  # symmetric: zero 8 stored as 7
    scales = gen.positive(k // group, n, low=0.5, high=2.0, dtype=torch.float16) * k ** -0.5 / 4
    return [x, qweight, qzeros, scales.to(torch.float16)]


def get_init_inputs(group: int = 128):
    return [group]
