"""``cross_entropy``: a classifier's or a language model's loss over class indices.

``F.cross_entropy(logits, target)`` / ``nn.CrossEntropyLoss()(logits, target)`` → the
library's ``cross_entropy`` (``kernels/triton/row_cross_entropy.py``): each row's logsumexp in
one read of the row, minus the target's logit, then a deterministic mean or sum in a
second launch, where eager PyTorch writes the whole log-softmax and reads it back.

Matched: floating-point ``[N, C]`` logits and int64 ``[N]`` targets; ``reduction``
``'mean'``, ``'sum'`` or ``'none'``; any ``ignore_index`` (a number or a module
attribute); no class weights, ``label_smoothing`` 0, the legacy ``size_average`` and
``reduce`` unset. Logits upcast to fp32 just before the loss (``logits.float()``, as HF's
causal-LM loss does) are read in their own dtype and the loss written in fp32: the same
numbers (the kernel's math is fp32 either way) without the fp32 copy.

Not covered: class weights, label smoothing, probabilities as targets, logits of other
than 2 dims (``[N, C, d1, ...]`` images, ``[C]`` alone); ``nll_loss(log_softmax(x))``
written in two calls; the loss written out as ``logsumexp - gather``.
"""

from __future__ import annotations

from typing import Any

import torch

from solforge.search.match import Match, Pattern, call
from solforge.search.nodes import arg, cast_source, dtype, number, op, tensor, val
from solforge.search.patterns.common import CROSS_ENTROPY, FLOATS, graph_nodes
from solforge.search.trace import AttrRef, TracedReference

_REDUCTIONS = ("mean", "sum", "none")


def _settings(n: Any) -> tuple[Any, str] | None:
    """(ignore_index, reduction) of a cross-entropy call the kernel computes exactly;
    None for any other."""
    if n.op == "call_module":
        mod = n.meta["module"]
        if mod.weight is not None or mod.label_smoothing != 0.0 or len(n.args) != 2 or \
                n.kwargs:
            return None
        return AttrRef(f"{n.target}.ignore_index", mod.ignore_index), mod.reduction
    if set(n.kwargs) - {"input", "target", "weight", "size_average", "ignore_index",
                        "reduce", "reduction", "label_smoothing"}:
        return None
    if any(arg(n, i, name) is not None
           for i, name in ((2, "weight"), (3, "size_average"), (5, "reduce"))):
        return None
    if number(arg(n, 7, "label_smoothing", 0.0)) != 0.0:
        return None
    ignore = arg(n, 4, "ignore_index", -100)
    if number(ignore) is None or number(ignore) != int(number(ignore)):
        return None
    return ignore, arg(n, 6, "reduction", "mean")


def find_cross_entropy(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        if op(n) != "cross_entropy" or tensor(n) is None:
            continue
        settings = _settings(n)
        if settings is None:
            continue
        ignore, reduction = settings
        if reduction not in _REDUCTIONS:
            continue
        x, target = arg(n, 0, "input"), arg(n, 1, "target")
        xt, tt = tensor(x), tensor(target)
        if xt is None or tt is None or xt.dim() != 2 or dtype(x) not in FLOATS or \
                tt.dtype != torch.int64 or tuple(tt.shape) != tuple(xt.shape[:1]) or \
                xt.shape[1] == 0:
            continue
        kw: dict[str, Any] = {}
        if reduction != "mean":
            kw["reduction"] = reduction
        optional = set()
        src = cast_source(x, torch.float32)
        if src is not None and dtype(src) in FLOATS and dtype(src) != torch.float32:
            optional.add(x)  # read in its own dtype; the loss still fp32
            x = src
            kw["out_dtype"] = torch.float32

        def build(g, m, x=x, target=target, ignore=ignore, kw=kw):
            return [call(g, CROSS_ENTROPY, (m(x), m(target), ignore), kw,
                         "logsumexp minus the target logit per row, one read of the "
                         "logits; a deterministic mean", "loss")]

        ii = val(ignore)
        found.append(Match(
            "cross_entropy", {n}, [n], build,
            f"cross-entropy over class indices (reduction {reduction}, ignore_index {ii})"
            + (f", {dtype(x)} logits upcast to fp32 read as they are" if optional else "")
            + " → cross_entropy (one read of the logits)",
            ("library_kernel", "fusion") if optional else ("library_kernel",), optional,
            (CROSS_ENTROPY,)))
    return found


CROSS_ENTROPY_PATTERN = Pattern("cross_entropy", find_cross_entropy,
                                "cross-entropy over class indices, mean/sum/none")
