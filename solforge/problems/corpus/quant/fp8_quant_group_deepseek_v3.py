"""Per-token-group (1x128) FP8 e4m3 quantization of activations, DeepSeek-V3's act_quant.

Reference: vLLM's ``native_per_token_group_quant_fp8`` (the torch form of DeepSeek-V3's
Triton ``act_quant`` and of vLLM/SGLang's ``per_token_group_quant_fp8``).
"""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "fp8_quant_group_deepseek_v3",
    "category": "quant",
    "models": ["DeepSeek-V3"],
    "family": "DeepSeek-V3",
    "shapes_from": "config.json of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 256 routed experts, "
                   "n_group 8, topk_group 4, top-8, q_lora_rank 1536, kv_lora_rank 512, "
                   "qk_rope_head_dim 64, 128 heads) and its FP8 128x128 block quantization",
    "precision": "fp8",
    "description": "Split each token's bf16 activations into groups of 128, scale each group by "
                   "s = max(amax, 1e-10) / 448 and cast to float8_e4m3fn; returns q [tokens, "
                   "hidden] and the fp32 scales [tokens, hidden/128] (row-major).",
    "workloads": [
        {"name": "cpu_small", "params": {"tokens": 1, "hidden": 384, "group": 128}, "cpu": True},
        {"name": "decode_b64", "params": {"tokens": 64, "hidden": 7168, "group": 128}},
        {"name": "prefill_4k", "params": {"tokens": 4096, "hidden": 7168, "group": 128}},
        {"name": "prefill_4k_dense_down", "params": {"tokens": 4096, "hidden": 18432,
                                                     "group": 128}, "visible": False},
        {"name": "experts_32k_down", "params": {"tokens": 32768, "hidden": 2048, "group": 128},
         "visible": False},
        {"name": "cpu_odd", "params": {"tokens": 13, "hidden": 640, "group": 128}, "cpu": True,
         "visible": False},
    ],
    # |x| and max (2), scale and clamp (2) per element
    "flops": lambda p: 4 * p["tokens"] * p["hidden"],
    # x read once (bf16), q written (fp8), one fp32 scale per group written
    "bytes": lambda p: 3 * p["tokens"] * p["hidden"] + 4 * p["tokens"] * p["hidden"] // p["group"],
}

FP8 = torch.float8_e4m3fn


class Model(nn.Module):
    def __init__(self, group_size: int = 128, eps: float = 1e-10):
        super().__init__()
        self.group_size = group_size
        self.eps = eps

    def forward(self, x: torch.Tensor):
        finfo = torch.finfo(FP8)
        g = self.group_size
        x_ = x.reshape(x.numel() // g, g)
        amax = x_.abs().max(dim=-1, keepdim=True)[0].clamp(min=self.eps).to(torch.float32)
        x_s = amax / finfo.max
        x_q = (x_ / x_s).clamp(min=finfo.min, max=finfo.max).to(FP8)
        x_q = x_q.reshape(x.shape)
        x_s = x_s.reshape(x.shape[:-1] + (x.shape[-1] // g,))
        return x_q, x_s


def get_inputs(tokens: int = 4096, hidden: int = 7168, dtype=torch.bfloat16):
    return [gen.randn(tokens, hidden, dtype=dtype)]


def get_init_inputs(group: int = 128):
    return [group, 1e-10]
