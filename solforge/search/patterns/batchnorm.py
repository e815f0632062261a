"""``batch_norm``: ``nn.BatchNorm1d/2d/3d``, the ReLU after it, a residual add and the ReLU
after that → the library's ``batch_norm_act``; the convolutions around stay the reference's.

Starting at each batch-norm module call ``b = bn(x)`` of a floating-point ``x`` (the
modules' exact classes), the longest of:

- ``relu(b)``: ``nn.ReLU`` (in place or not), ``F.relu`` (``inplace`` either way),
  ``torch.relu``, ``b.relu()``, when only it reads ``b``;
- ``b + r`` or ``r + b`` (``+``, and ``+=``, which fx records as ``+``; ``torch.add`` and
  ``.add`` without ``alpha``), ``r`` a tensor of ``b``'s shape and dtype, when only the add
  reads ``b``; then ``relu`` of the sum when only it reads the sum. When ``r`` is itself a
  batch-norm call read only by the add (ResNet's downsample branch), both batch norms go
  into the one call (``residual_bn``): their statistics, then one pass writing the sum.

The call passes the modules themselves (``self.bn1``, ``self.downsample[1]``): their
``training`` flag, momentum, eps, parameters and buffers are read when the candidate runs,
so a model put in ``.eval()`` later normalises with its running statistics, and the
running buffers and ``num_batches_tracked`` updated in training are the modules' own, as
the reference updates them.

Why: with the convolutions left to the reference's own calls (cuDNN's TF32 rounding is
what a tolerance of 1e-4 accepts; another algorithm's fails it), the batch norms,
ReLUs and the add are the memory-bound passes left to fuse.

fp32 outputs that reach a convolution (directly or through anything after them) are left
to PyTorch: cuDNN runs fp32 convolutions on TF32 by default, which rounds each input to
10 mantissa bits, so an output one ulp away from PyTorch's batch norm (the statistics'
summation order differs) can round the other way there and move the convolution's output
by 1e-4. On an H100 (torch 2.11), KernelBench's ResNet block with ``bn1`` + ReLU fused
too failed atol = rtol = 1e-4 on 5.9e-5 of its outputs (max error 2.9e-4;
``benchmarks/gpu/batchnorm_probe.py``), while the kernel alone is within 1.5e-6 of
PyTorch. 16-bit outputs go into a convolution as they are (no further rounding) and stay
matched.

Not covered: ``F.batch_norm`` calls; subclasses of the modules (``SyncBatchNorm``,
``LazyBatchNorm*``, a reference's own); in-place ``torch.relu_`` / ``b.relu_()`` (the
batch norm alone is replaced; the in-place ReLU then runs on its output, as in the
reference); other activations (GELU, SiLU after a batch norm stay separate: ``bias_act``
may take them); parameters or buffers in another dtype than fp32 or the input's; a
residual that broadcasts.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn

from solforge.search.match import Match, Pattern, call
from solforge.search.nodes import arg, dtype, only_user, op, operands, shape, tensor
from solforge.search.patterns.common import (
    BATCH_NORM_ACT,
    FLOATS,
    FUSED,
    graph_nodes,
    reaching_a_conv,
)
from solforge.search.trace import AttrRef, TracedReference

_CLASSES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def _batch_norm(n: Any) -> bool:
    """A call of one of the batch-norm modules whose rewrite keeps the reference's result."""
    if not isinstance(n, fx.Node) or n.op != "call_module" or \
            type(n.meta.get("module")) not in _CLASSES or n.kwargs or len(n.args) != 1:
        return False
    x, mod = n.args[0], n.meta["module"]
    xt = tensor(x)
    if xt is None or xt.dtype not in FLOATS or xt.dim() < 2 or \
            shape(n) != tuple(xt.shape) or dtype(n) != xt.dtype:
        return False
    return all(t is None or t.dtype in (torch.float32, xt.dtype)
               for t in (mod.weight, mod.bias, mod.running_mean, mod.running_var))


def _relu_of(u: Any, src: fx.Node) -> bool:
    """``u`` is a ReLU of ``src`` that writes nothing the rewrite would leave behind."""
    if op(u) != "relu" or arg(u, 0, "input") is not src:
        return False
    if u.op == "call_method":
        return len(u.args) == 1 and not u.kwargs
    if u.op == "call_function":
        return set(u.kwargs) <= {"input", "inplace"} and len(u.args) <= 2
    return True  # nn.ReLU


def _residual_add(u: Any, b: fx.Node) -> Any:
    """The other operand when ``u`` is ``b + r`` or ``r + b`` with ``r`` of ``b``'s shape
    and dtype; None otherwise."""
    if op(u) != "add" or len(u.args) + len(u.kwargs) != 2 or \
            set(u.kwargs) - {"input", "other"}:
        return None
    a, c = operands(u)
    r = c if a is b else a if c is b else None
    if r is None or r is b or not isinstance(r, fx.Node) or tensor(r) is None:
        return None
    if shape(r) != shape(b) or dtype(r) != dtype(b) or shape(u) != shape(b) or \
            dtype(u) != dtype(b):
        return None
    return r


def _module(n: fx.Node) -> AttrRef:
    """The module itself, printed ``self.<name>``: read when the candidate runs."""
    return AttrRef(str(n.target), None)


def find_batch_norm(tr: TracedReference) -> list[Match]:
    found: list[Match] = []
    taken: set[fx.Node] = set()
    into_conv = reaching_a_conv(tr)
    for b in graph_nodes(tr):
        if b in taken or not _batch_norm(b):
            continue
        nodes, out, residual, rbn, relu = {b}, b, None, None, False
        u = only_user(b)
        r = _residual_add(u, b) if u is not None else None
        if u is not None and _relu_of(u, b):
            nodes, out, relu = {b, u}, u, True
        elif r is not None:
            nodes, out, residual = {b, u}, u, r
            if _batch_norm(r) and only_user(r) is u and r not in taken:
                rbn = r
                nodes.add(r)
            v = only_user(u)
            if v is not None and _relu_of(v, u):
                nodes.add(v)
                out, relu = v, True
        if dtype(out) == torch.float32 and out in into_conv:
            continue  # TF32 convolutions after it (the module docstring)
        taken |= nodes
        x = b.args[0]
        res_in = rbn.args[0] if rbn is not None else residual

        def build(g, m, x=x, b=b, res_in=res_in, rbn=rbn, relu=relu):
            kwargs: dict[str, Any] = {}
            if relu:
                kwargs["relu"] = True
            if res_in is not None:
                kwargs["residual"] = m(res_in)
            if rbn is not None:
                kwargs["residual_bn"] = _module(rbn)
            what = "batch norm" + (" of both operands" if rbn is not None else "") + \
                (" + residual" if res_in is not None else "") + (" + ReLU" if relu else "")
            return [call(g, BATCH_NORM_ACT, (m(x), _module(b)), kwargs,
                         f"{what}: statistics, then one pass (mode, momentum and running "
                         "buffers: the modules', when run)", "normed")]

        kind = type(b.meta["module"]).__name__
        parts = [f"{kind} {b.target}"]
        if rbn is not None:
            parts.append(f"{type(rbn.meta['module']).__name__} {rbn.target} (residual)")
        elif residual is not None:
            parts.append("residual add")
        if relu:
            parts.append("ReLU")
        found.append(Match("batch_norm", nodes, [out], build,
                           " + ".join(parts) + " → batch_norm_act",
                           FUSED if len(nodes) > 1 else ("library_kernel",), set(),
                           (BATCH_NORM_ACT,)))
    return found


BATCH_NORM_PATTERN = Pattern("batch_norm", find_batch_norm,
                             "BatchNorm (train or eval) [+ residual [BatchNorm]] [+ ReLU]")
