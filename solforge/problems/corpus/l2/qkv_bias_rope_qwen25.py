"""QKV projection with bias + rotary embedding of Qwen 2.5 (HF Qwen2Attention before the
attention itself), bf16, RoPE theta 1e6, GQA head counts; positions continue a KV cache."""

import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "qkv_bias_rope_qwen25",
    "category": "L2",
    "models": ["Qwen 2.5 7B", "Qwen 2.5 72B"],
    "family": "Qwen2.5",
    "shapes_from": "config.json of Qwen/Qwen2.5-7B (hidden_size 3584, intermediate_size 18944, 28 "
                   "heads, 4 kv heads, vocab 152064) and Qwen2.5-72B (hidden 8192)",
    "precision": "bf16",
    "description": "q/k/v = Linear with bias of the hidden states, split into heads "
                   "(batch, heads, seq, head_dim); q and k rotated by RoPE at position "
                   "past_len + i (Qwen2RotaryEmbedding); returns (q, k, v).",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 17, "past": 0, "hidden": 64,
                                         "heads": 4, "kv_heads": 2, "head_dim": 16},
         "cpu": True},
        {"name": "cpu_decode", "params": {"batch": 5, "seq": 1, "past": 37, "hidden": 64,
                                          "heads": 4, "kv_heads": 2, "head_dim": 16},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "seq": 11, "past": 23, "hidden": 112,
                                       "heads": 7, "kv_heads": 1, "head_dim": 32}, "cpu": True,
         "visible": False},
        {"name": "decode_b64_7b", "params": {"batch": 64, "seq": 1, "past": 4096,
                                             "hidden": 3584, "heads": 28, "kv_heads": 4,
                                             "head_dim": 128}},
        {"name": "prefill_b1_s4096_7b", "params": {"batch": 1, "seq": 4096, "past": 0,
                                                   "hidden": 3584, "heads": 28, "kv_heads": 4,
                                                   "head_dim": 128}},
        {"name": "decode_b1_7b", "params": {"batch": 1, "seq": 1, "past": 30000,
                                            "hidden": 3584, "heads": 28, "kv_heads": 4,
                                            "head_dim": 128}, "visible": False},
        # Qwen 2.5 72B with tensor parallelism 8: 8 q heads and 1 kv head per GPU
        {"name": "prefill_b2_s2048_72b_tp8", "params": {"batch": 2, "seq": 2048, "past": 0,
                                                        "hidden": 8192, "heads": 8,
                                                        "kv_heads": 1, "head_dim": 128},
         "visible": False},
    ],
    # GEMM + bias, RoPE on q and k (3 per element), the angles' cos/sin (about 20 per pair)
    "flops": lambda p: p["batch"] * p["seq"] * (
        (2 * p["hidden"] + 1) * (p["heads"] + 2 * p["kv_heads"]) * p["head_dim"]
        + 3 * (p["heads"] + p["kv_heads"]) * p["head_dim"] + 10 * p["head_dim"]),
    # hidden states, weights and biases, q/k/v out (bf16), int64 positions
    "bytes": lambda p: 2 * (p["batch"] * p["seq"] * p["hidden"]
                            + (p["hidden"] + 1 + p["batch"] * p["seq"])
                            * (p["heads"] + 2 * p["kv_heads"]) * p["head_dim"])
    + 8 * p["batch"] * p["seq"],
}


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, hidden: int = 3584, heads: int = 28, kv_heads: int = 4,
                 head_dim: int = 128, rope_theta: float = 1000000.0, dtype=torch.bfloat16):
        super().__init__()
        self.head_dim = head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=True, dtype=dtype)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True, dtype=dtype)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=True, dtype=dtype)
        for lin in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.normal_(lin.weight, std=lin.in_features ** -0.5)
            nn.init.normal_(lin.bias, std=0.2)
        inv_freq = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor):
        b, s, _ = hidden_states.shape
        # Qwen2RotaryEmbedding: fp32 angles, cos/sin cast to the activation dtype
        inv_freq = self.inv_freq[None, :, None].float().expand(b, -1, 1)
        freqs = (inv_freq @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos().to(hidden_states.dtype).unsqueeze(1)
        sin = emb.sin().to(hidden_states.dtype).unsqueeze(1)

        q = self.q_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, s, -1, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v


def get_inputs(batch: int = 1, seq: int = 4096, past: int = 0, hidden: int = 3584,
               dtype=torch.bfloat16):
    x = gen.randn(batch, seq, hidden, dtype=dtype)
    past_lens = gen.lengths(batch, past, min_len=0).to(torch.int64)  # tokens already cached
    position_ids = past_lens[:, None] + torch.arange(seq)[None, :]
    return [x, position_ids]


def get_init_inputs(hidden: int = 3584, heads: int = 28, kv_heads: int = 4, head_dim: int = 128,
                    dtype=torch.bfloat16):
    return [hidden, heads, kv_heads, head_dim, 1000000.0, dtype]
