"""What the built-in patterns share: the library functions they call, dtypes, levers, and
which nodes reach a convolution."""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from solforge.search.match import LibraryFunction
from solforge.search.nodes import op
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
MAX_DIM = LibraryFunction("max_dim")
MIN_DIM = LibraryFunction("min_dim")
SWIGLU = LibraryFunction("swiglu")
GEGLU = LibraryFunction("geglu")
BIAS_ACT = LibraryFunction("bias_act")
ROTARY = LibraryFunction("rotary_embedding")
FP8_PER_TENSOR = LibraryFunction("fp8_quant_per_tensor")
FP8_PER_GROUP = LibraryFunction("fp8_quant_per_group")
GROUP_NORM = LibraryFunction("group_norm")
INSTANCE_NORM = LibraryFunction("instance_norm")
DIV_BY_ROW_NORM = LibraryFunction("div_by_row_norm")
DIV_BY_DIM_NORM = LibraryFunction("div_by_dim_norm")

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
FP8 = torch.float8_e4m3fn
FUSED = ("library_kernel", "fusion")


def graph_nodes(tr: TracedReference) -> list[fx.Node]:
    return list(tr.graph.nodes)


def first_only(n: fx.Node, names: tuple[str, str] | None = None
               ) -> tuple[fx.Node, set[fx.Node]] | None:
    """For a node whose value is a pair (``nn.MultiheadAttention``'s output and weights,
    ``torch.max(x, dim)``'s values and indices): the one node reading its first item and
    the nodes reading its second that nothing reads (``out, _ = f(...)`` leaves one);
    None when the second item is used, the first read twice or the pair passed whole.
    ``names`` are the items' attribute names, read as ``[0]`` and ``[1]`` are."""
    firsts, seconds = [], set()
    for u in n.users:
        i = _item_index(u, names)
        if i == 0:
            firsts.append(u)
        elif i == 1 and not u.users:
            seconds.add(u)
        else:
            return None
    return (firsts[0], seconds) if len(firsts) == 1 else None


def _item_index(u: fx.Node, names: tuple[str, str] | None) -> int | None:
    if op(u) == "getitem" and len(u.args) == 2 and not u.kwargs and \
            isinstance(u.args[1], int) and u.args[1] in (0, 1):
        return u.args[1]
    if names and u.op == "call_function" and u.target is getattr and \
            len(u.args) == 2 and u.args[1] in names:
        return names.index(u.args[1])
    return None


_CONV_MODULES = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                 nn.ConvTranspose3d)
_CONV_FUNCTIONS = {F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
                   F.conv_transpose3d}


def _is_conv(n: fx.Node) -> bool:
    if n.op == "call_module":
        return isinstance(n.meta.get("module"), _CONV_MODULES)
    return n.op == "call_function" and n.target in _CONV_FUNCTIONS


def reaching_a_conv(tr: TracedReference) -> set[fx.Node]:
    """The nodes whose value flows into a convolution, directly or through other nodes: an
    fp32 normalisation there is left to PyTorch (cuDNN's TF32 rounding of the
    convolution's input turns a kernel's ulp of difference into 1e-4; the ``batch_norm``
    pattern's docstring has the measurement)."""
    reach: set[fx.Node] = set()
    for n in reversed(graph_nodes(tr)):
        if any(_is_conv(u) or u in reach for u in n.users):
            reach.add(n)
    return reach
