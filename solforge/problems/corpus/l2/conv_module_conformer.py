"""The Conformer convolution module (HF Wav2Vec2ConformerConvolutionModule, eval mode):
LayerNorm, pointwise conv to 2C + GLU, depthwise conv (kernel 31, same padding), BatchNorm
with running statistics, SiLU, pointwise conv back to C; the residual added; fp16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from solforge.problems import gen

SOLFORGE = {
    "name": "conv_module_conformer",
    "category": "L2",
    "models": ["wav2vec2-conformer large", "Conformer-CTC large"],
    "family": "Conformer",
    "shapes_from": "config.json of facebook/wav2vec2-conformer-rope-large-960h-ft (hidden 1024, "
                   "conv_depthwise_kernel_size 31; 20 ms frames: 10 s -> 499 frames) and NeMo "
                   "Conformer-CTC large (d_model 512, kernel 31, 40 ms frames)",
    "precision": "fp16",
    "description": "x (b, T, C) -> x + pw2(silu(bn(dw(glu(pw1(LN(x)^T), dim=1)))))^T.",
    "workloads": [
        {"name": "cpu_small", "params": {"batch": 1, "frames": 20, "hidden": 16, "kernel": 7},
         "cpu": True},
        {"name": "cpu_odd", "params": {"batch": 2, "frames": 11, "hidden": 8, "kernel": 5},
         "cpu": True, "visible": False},
        {"name": "w2v_large_10s_b8", "params": {"batch": 8, "frames": 499, "hidden": 1024,
                                                "kernel": 31}},
        {"name": "nemo_large_30s_b16", "params": {"batch": 16, "frames": 750, "hidden": 512,
                                                  "kernel": 31}},
        {"name": "w2v_large_30s_b4", "params": {"batch": 4, "frames": 1499, "hidden": 1024,
                                                "kernel": 31}, "visible": False},
    ],
    "flops": lambda p: 2 * p["batch"] * p["frames"] * p["hidden"]
    * (3 * p["hidden"] + p["kernel"]),
    "bytes": lambda p: 2 * (2 * p["batch"] * p["frames"] * p["hidden"] + 3 * p["hidden"] ** 2),
}


class Model(nn.Module):
    def __init__(self, hidden: int = 1024, kernel: int = 31, dtype=torch.float16):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, dtype=dtype)
        self.pw1 = nn.Conv1d(hidden, 2 * hidden, 1, bias=False, dtype=dtype)
        self.dw = nn.Conv1d(hidden, hidden, kernel, padding=(kernel - 1) // 2, groups=hidden,
                            bias=False, dtype=dtype)
        self.bn = nn.BatchNorm1d(hidden, dtype=dtype)
        self.pw2 = nn.Conv1d(hidden, hidden, 1, bias=False, dtype=dtype)
        with torch.no_grad():
            self.bn.running_mean.normal_(0, 0.2)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.normal_(0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.glu(self.pw1(self.norm(x).transpose(1, 2)), dim=1)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        return x + y.transpose(1, 2)


def get_inputs(batch: int = 8, frames: int = 499, hidden: int = 1024, dtype=torch.float16):
    return [gen.randn(batch, frames, hidden, dtype=dtype)]


def get_init_inputs(hidden: int = 1024, kernel: int = 31, dtype=torch.float16):
    return [hidden, kernel, dtype]
