"""Self-attention block of a Llama 3 decoder layer (HF LlamaAttention, sdpa path), bf16:
QKV projections, RoPE (theta 500000), GQA causal attention, output projection."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "attention_block_llama3",
    "category": "L2",
    "models": ["Llama 3 8B", "Llama 3 70B"],
    "family": "Llama 3",
    "shapes_from": "config.json of meta-llama/Meta-Llama-3-8B (hidden_size 4096, "
                   "intermediate_size 14336, 32 heads, 8 kv heads, vocab 128256) and "
                   "Meta-Llama-3-70B (hidden 8192, 64 heads, 8 kv heads, intermediate 28672)",
    "precision": "bf16",
    "description": "A whole prefill attention block of Llama 3: q/k/v projections, rotary "
                   "embedding from position ids, causal GQA attention (k/v heads repeated), "
                   "output projection.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 2, "seq": 17, "hidden": 64, "heads": 4,
                                         "kv_heads": 2, "head_dim": 16}, "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 3, "seq": 13, "hidden": 96, "heads": 6,
                                       "kv_heads": 3, "head_dim": 16}, "cpu": True,
         "visible": False},
        {"name": "short_b32_s128_8b", "params": {"batch": 32, "seq": 128, "hidden": 4096,
                                                 "heads": 32, "kv_heads": 8, "head_dim": 128}},
        {"name": "prefill_b1_s4096_8b", "params": {"batch": 1, "seq": 4096, "hidden": 4096,
                                                   "heads": 32, "kv_heads": 8,
                                                   "head_dim": 128}},
        {"name": "prefill_b4_s2048_8b", "params": {"batch": 4, "seq": 2048, "hidden": 4096,
                                                   "heads": 32, "kv_heads": 8,
                                                   "head_dim": 128}, "visible": False},
        # Llama 3 70B with tensor parallelism 8: 8 q heads and 1 kv head per GPU
        {"name": "prefill_b1_s8192_70b_tp8", "params": {"batch": 1, "seq": 8192,
                                                        "hidden": 8192, "heads": 8,
                                                        "kv_heads": 1, "head_dim": 128},
         "visible": False},
    ],
    # projections + causal attention (only the unmasked half of QK^T and PV) + RoPE
    "flops": lambda p: 2 * p["batch"] * p["seq"] * p["hidden"] * p["head_dim"]
    * (2 * p["heads"] + 2 * p["kv_heads"])
    + 2 * p["batch"] * p["heads"] * p["seq"] * (p["seq"] + 1) * p["head_dim"]
    + 3 * p["batch"] * p["seq"] * (p["heads"] + p["kv_heads"]) * p["head_dim"],
    # hidden states in and out, four weight matrices (bf16), int64 position ids
    "bytes": lambda p: 2 * (2 * p["batch"] * p["seq"] * p["hidden"]
                            + p["hidden"] * p["head_dim"] * (2 * p["heads"] + 2 * p["kv_heads"]))
    + 8 * p["batch"] * p["seq"],
    # no "outliers": random outlier channels through random q/k weights give attention logits
    # far beyond a trained model's, where the bf16 rounding of q and k that the model itself
    # does (and a fused kernel may do elsewhere) decides the output, not the kernel's accuracy
    "distributions": ["normal", "uniform"],
}


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, heads: int = 32, kv_heads: int = 8,
                 head_dim: int = 128, rope_theta: float = 500000.0, dtype=torch.bfloat16):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False, dtype=dtype)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False, dtype=dtype)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False, dtype=dtype)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False, dtype=dtype)
        # q and k of std 1.5 (scores of std ~2.2: attention neither flat nor one-hot), v and
        # the output of unit scale, at every size (Llama 3 8B's 0.02 is 1.3 / sqrt(4096))
        for lin, gain in ((self.q_proj, 1.5), (self.k_proj, 1.5), (self.v_proj, 1.0),
                          (self.o_proj, 1.0)):
            nn.init.normal_(lin.weight, std=gain * lin.in_features ** -0.5)
        inv_freq = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        b, s, _ = hidden_states.shape
        # LlamaRotaryEmbedding: fp32 angles, cos/sin cast to the activation dtype
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

        n_rep = self.heads // self.kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             scale=self.head_dim ** -0.5)
        out = out.transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(out)


def get_inputs(batch: int = 1, seq: int = 4096, hidden: int = 4096, dtype=torch.bfloat16):
    x = gen.randn(batch, seq, hidden, dtype=dtype)
    position_ids = torch.arange(seq).unsqueeze(0).expand(batch, seq).contiguous()
    return [x, position_ids]


def get_init_inputs(hidden: int = 4096, heads: int = 32, kv_heads: int = 8, head_dim: int = 128,
                    dtype=torch.bfloat16):
    return [hidden, heads, kv_heads, head_dim, 500000.0, dtype]
