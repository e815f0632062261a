"""``depthwise_conv``: an ``nn.Conv1d`` / ``nn.Conv2d`` with ``groups == in_channels`` →
the library's ``depthwise_conv`` (``kernels/triton/depthwise.py``), PyTorch's own
sums in PyTorch's order, bit for bit where PyTorch runs its CUDA depthwise kernel.

Inductor does not lower convolutions: eager and ``torch.compile`` both call ATen's
depthwise kernel for a contiguous fp32 or bf16 input (a thread per output, the taps read
one output at a time, a runtime loop for kernel sizes other than 1x1 and 3x3). KernelBench
has five such problems at level 1 (``82``-``86``) and the depthwise layers of MobileNet,
EfficientNet and ShuffleNet at level 3; the corpus has ConvNeXt's 7x7, MBConv's, the
Conformer's 31-tap and Mamba's 4-tap causal convolutions (fp16 and bf16).

Matched: a call of the module classes themselves (not subclasses), with ``groups`` ==
``in_channels`` > 1, ``out_channels`` a multiple of it, zero padding (numbers, or
``"valid"``, or ``"same"``), a batched input (3-D for ``Conv1d``, 4-D for ``Conv2d``) of
fp32, bf16 or fp16 in contiguous layout, its weight and bias of the input's dtype. No size
floor: the example values are the first visible workload's, a CPU-sized one in the corpus
(a small convolution's launch costs more than it saves: the evaluator's timing decides, and
the CUDA-graph candidate replays the launches). The call passes the module itself (``self.<name>``): its weight, bias,
stride, padding and dilation are read when the candidate runs.

Offered on a GPU only (``Pattern.gpu_only``: on a CPU the kernel would run under Triton's
interpreter). Exactness: fp32 and bf16 results are ATen's kernel's to the bit (so an fp32
output may feed a TF32 convolution, which the batch-norm pattern must avoid); fp16 is
judged by the problem's tolerance, as PyTorch runs cuDNN for most fp16 shapes.

Not covered: ``F.conv1d`` / ``F.conv2d`` calls; grouped convolutions that are not
depthwise; ``nn.Conv3d``; transposed convolutions; padding modes other than zeros; the
activation or slice after the convolution (Mamba's ``[..., :L]`` and SiLU stay separate
calls).
"""

from __future__ import annotations

import torch.fx as fx
import torch.nn as nn

from solforge.search.match import LibraryFunction, Match, Pattern, call
from solforge.search.nodes import tensor
from solforge.search.patterns.common import FLOATS, graph_nodes
from solforge.search.trace import AttrRef, TracedReference

DEPTHWISE_CONV = LibraryFunction("depthwise_conv")
KIND = "depthwise_conv"
_DIMS = {nn.Conv1d: 3, nn.Conv2d: 4}


def _depthwise(n: fx.Node) -> str | None:
    """What is depthwise about this module call (for the description), or None when the
    rewrite would not keep the reference's result."""
    if n.op != "call_module" or n.kwargs or len(n.args) != 1:
        return None
    mod = n.meta.get("module")
    dims = _DIMS.get(type(mod))
    if dims is None or mod.groups <= 1 or mod.groups != mod.in_channels or \
            mod.out_channels % mod.in_channels or mod.padding_mode != "zeros":
        return None
    if isinstance(mod.padding, str) and mod.padding == "same" and \
            any(d * (k - 1) % 2 for d, k in zip(mod.dilation, mod.kernel_size)):
        return None  # asymmetric "same" padding: ATen pads the input first
    x = tensor(n.args[0])
    if x is None or x.dim() != dims or x.dtype not in FLOATS or \
            not x.is_contiguous():
        return None
    if mod.weight.dtype != x.dtype or (mod.bias is not None and mod.bias.dtype != x.dtype):
        return None
    k = "x".join(str(v) for v in mod.kernel_size)
    mult = mod.out_channels // mod.in_channels
    return (f"{type(mod).__name__} {n.target} ({mod.in_channels} channels"
            + (f" x{mult}" if mult > 1 else "") + f", {k}, {str(x.dtype)[6:]})")


def find_depthwise_conv(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        what = _depthwise(n)
        if what is None:
            continue

        def build(g, m, n=n):
            return [call(g, DEPTHWISE_CONV, (m(n.args[0]), AttrRef(str(n.target), None)), {},
                         "depthwise convolution: ATen's sums in ATen's order, a tile of "
                         "outputs a program", "conv")]

        found.append(Match(KIND, {n}, [n], build, f"{what} → depthwise_conv",
                           ("library_kernel",), set(), (DEPTHWISE_CONV,)))
    return found


DEPTHWISE_CONV_PATTERN = Pattern(KIND, find_depthwise_conv,
                                 "depthwise Conv1d/Conv2d (groups == in_channels)",
                                 gpu_only=True)

