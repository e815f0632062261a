"""What the built-in patterns share: the library functions they call, dtypes, levers."""

from __future__ import annotations

import torch
import torch.fx as fx

from solforge.search.match import LibraryFunction
from solforge.search.trace import TracedReference

RMS_NORM = LibraryFunction("rms_norm")
ADD_RMS_NORM = LibraryFunction("add_rms_norm")
LAYER_NORM = LibraryFunction("layer_norm")
BATCH_NORM_ACT = LibraryFunction("batch_norm_act")
SOFTMAX = LibraryFunction("softmax")
LOG_SOFTMAX = LibraryFunction("log_softmax")
ARGMAX = LibraryFunction("argmax")
ARGMIN = LibraryFunction("argmin")
ARGMAX_DIM = LibraryFunction("argmax_dim")
ARGMIN_DIM = LibraryFunction("argmin_dim")
CROSS_ENTROPY = LibraryFunction("cross_entropy")
SOFTMAX_TOPK = LibraryFunction("softmax_topk")
SUM_DIM = LibraryFunction("sum_dim")
SWIGLU = LibraryFunction("swiglu")
GEGLU = LibraryFunction("geglu")
BIAS_ACT = LibraryFunction("bias_act")
ROTARY = LibraryFunction("rotary_embedding")
FP8_PER_TENSOR = LibraryFunction("fp8_quant_per_tensor")
FP8_PER_GROUP = LibraryFunction("fp8_quant_per_group")

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
FP8 = torch.float8_e4m3fn
FUSED = ("library_kernel", "fusion")


def graph_nodes(tr: TracedReference) -> list[fx.Node]:
    return list(tr.graph.nodes)
