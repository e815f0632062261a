"""gpt-oss's expert activation (HF GptOssExperts): the gate_up projection's output holds gate
and up interleaved (even and odd columns); gate is clamped above at 7, up to [-7, 7], and
the activation is (up + 1) * gate * sigmoid(1.702 * gate); bf16."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "clamped_swiglu_gpt_oss",
    "category": "L2",
    "models": ["gpt-oss 20B", "gpt-oss 120B"],
    "family": "gpt-oss",
    "shapes_from": "config.json of openai/gpt-oss-20b (intermediate_size 2880, num_local_experts "
                   "32, experts_per_token 4, swiglu_limit 7.0) and gpt-oss-120b (128 experts); "
                   "rows = tokens x top-4 routed copies",
    "precision": "bf16",
    "description": "gu (rows, 2I) -> g = gu[:, ::2].clamp(max=7), u = gu[:, 1::2].clamp(-7, 7); "
                   "(u + 1) * g * sigmoid(1.702 g): (rows, I).",
    "workloads": [
        {"name": "cpu_small", "params": {"rows": 6, "intermediate": 32}, "cpu": True},
        {"name": "cpu_odd", "params": {"rows": 3, "intermediate": 45}, "cpu": True,
         "visible": False},
        {"name": "decode_b64_top4", "params": {"rows": 256, "intermediate": 2880}},
        {"name": "prefill_4k_top4", "params": {"rows": 16384, "intermediate": 2880}},
        {"name": "prefill_8k_top4", "params": {"rows": 32768, "intermediate": 2880},
         "visible": False},
    ],
    "flops": lambda p: 8 * p["rows"] * p["intermediate"],
    "bytes": lambda p: 2 * 3 * p["rows"] * p["intermediate"],
}


class Model(nn.Module):
    def __init__(self, limit: float = 7.0, alpha: float = 1.702):
        super().__init__()
        self.limit, self.alpha = limit, alpha

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        return (up + 1) * (gate * torch.sigmoid(gate * self.alpha))


def get_inputs(rows: int = 256, intermediate: int = 2880, dtype=torch.bfloat16):
    # pre-activations of std 4: the clamp at 7 is reached by a few percent of them
    return [gen.randn(rows, 2 * intermediate, dtype=dtype, scale=4.0)]


def get_init_inputs():
    return [7.0, 1.702]
