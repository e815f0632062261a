"""``group_norm`` (GroupNorm and InstanceNorm) and ``row_norm`` (a row divided by its mean
absolute value or its L2 norm): normalisations by row statistics → the library's
``row_norm`` kernels, which read a long row once where the GPU is full
(``kernels/triton/row_norm.py``, ``cooperative``).

``group_norm``:

- ``nn.GroupNorm`` (the exact class) or ``F.group_norm(x, groups, weight, bias, eps)`` →
  ``group_norm(x, groups, weight, bias, eps)``;
- ``nn.InstanceNorm1d/2d/3d`` (the exact classes) with ``track_running_stats=False`` (the
  default: the statistics are the instance's own in training and in eval), on a batched
  input, or ``F.instance_norm(x)`` with no running statistics and ``use_input_stats``
  true → ``instance_norm(x, weight, bias, eps)``.

A module's parameters and eps are passed as its attributes (``self.gn.weight``), read
when the candidate runs. The input is floating point with spatial dims, the weight and
bias (if any) of the input's dtype. An fp32 result that reaches a convolution is left to
PyTorch, as the ``batch_norm`` pattern leaves it (cuDNN's TF32 rounding of the
convolution's input turns an ulp of difference into 1e-4).

``row_norm``: ``x / x.abs().mean(-1, keepdim=True)`` (``torch.mean(torch.abs(x), dim,
keepdim=True)``; KernelBench's 38_L1Norm_) → ``div_by_row_norm(x, "mean_abs")``, and
``x / torch.norm(x, p=2, dim=-1, keepdim=True)`` (``x.norm(...)``, ``p`` 2 or the default
``"fro"``, or ``torch.linalg.vector_norm(x, 2, -1, keepdim=True)``; KernelBench's
39_L2Norm_) → ``div_by_row_norm(x, "l2")``; over the last dim, written by dim -1 or the
last index, the reduction read only by the division, no ``dtype``.

Not covered: InstanceNorm with running statistics (``track_running_stats=True``) or an
unbatched input; subclasses of the modules; parameters in another dtype than the
input's; GroupNorm followed by its activation fused (SiLU after it stays a separate
``bias_act``); a division by a norm over another dim than the last (KernelBench's
36_RMSNorm_ over channels) or clamped (``F.normalize``'s ``max(norm, eps)``), norms
written as ``sqrt(sum(x ** 2))``, and RMS normalisation without a weight.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn

from solforge.search.match import (
    Match,
    Pattern,
    arg,
    call,
    dtype,
    is_last_dim,
    number,
    op,
    operands,
    shape,
    tensor,
)
from solforge.search.patterns.common import (
    DIV_BY_ROW_NORM,
    FLOATS,
    GROUP_NORM,
    INSTANCE_NORM,
    graph_nodes,
    reaching_a_conv,
)
from solforge.search.trace import AttrRef, TracedReference

_INSTANCE_NORMS = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)


def _params_match(x: Any, params: list[Any]) -> bool:
    """Every given parameter a tensor of ``x``'s dtype."""
    return all(t is None or (isinstance(t, torch.Tensor) and t.dtype == dtype(x))
               for t in params)


def _module_call(n: fx.Node) -> Any:
    """(x, the module, its attribute path) of a plain one-argument module call, else
    None."""
    if n.op != "call_module" or n.kwargs or len(n.args) != 1:
        return None
    return n.args[0], n.meta["module"], str(n.target)


def _group_norm(n: fx.Node) -> tuple[Any, tuple, dict, str] | None:
    """(library function, args, what) for a GroupNorm or InstanceNorm node whose rewrite
    keeps the reference's result, else None. ``args`` hold fx nodes and constants."""
    kind = op(n)
    if n.op == "call_module":
        x, mod, t = _module_call(n) or (None, None, "")
        if mod is None:
            return None
        w = AttrRef(f"{t}.weight", None) if mod.weight is not None else None
        b = AttrRef(f"{t}.bias", None) if mod.bias is not None else None
        eps = AttrRef(f"{t}.eps", mod.eps)
        if not _params_match(x, [mod.weight, mod.bias]):
            return None
        if kind == "group_norm":
            return (GROUP_NORM, (x, AttrRef(f"{t}.num_groups", mod.num_groups), w, b, eps),
                    f"GroupNorm {t}")
        xt = tensor(x)
        if mod.track_running_stats or xt is None or \
                xt.dim() != mod._get_no_batch_dim() + 1:
            return None
        return INSTANCE_NORM, (x, w, b, eps), f"{type(mod).__name__} {t}"
    if kind == "group_norm":
        if set(n.kwargs) - {"input", "num_groups", "weight", "bias", "eps"}:
            return None
        x, g = arg(n, 0, "input"), arg(n, 1, "num_groups")
        w, b, eps = arg(n, 2, "weight"), arg(n, 3, "bias"), arg(n, 4, "eps", 1e-5)
        if not _params_match(x, [tensor(t) if t is not None else None for t in (w, b)]):
            return None
        return GROUP_NORM, (x, g, w, b, eps), "F.group_norm"
    # F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats,
    # momentum, eps)
    names = ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats",
             "momentum", "eps")
    if set(n.kwargs) - set(names) or len(n.args) > len(names):
        return None
    a = {k: arg(n, i, k) for i, k in enumerate(names)}
    if a["running_mean"] is not None or a["running_var"] is not None or \
            a["use_input_stats"] not in (None, True):
        return None
    x, w, b = a["input"], a["weight"], a["bias"]
    if not _params_match(x, [tensor(t) if t is not None else None for t in (w, b)]):
        return None
    return INSTANCE_NORM, (x, w, b, 1e-5 if a["eps"] is None else a["eps"]), "F.instance_norm"


def find_group_norm(tr: TracedReference) -> list[Match]:
    found = []
    into_conv = reaching_a_conv(tr)
    for n in graph_nodes(tr):
        if op(n) not in ("group_norm", "instance_norm"):
            continue
        got = _group_norm(n)
        if got is None:
            continue
        fn, args, what = got
        x = args[0]
        xt = tensor(x)
        if xt is None or xt.dtype not in FLOATS or xt.dim() < (3 if fn is INSTANCE_NORM
                                                              else 2) or \
                shape(n) != tuple(xt.shape) or dtype(n) != xt.dtype:
            continue
        if dtype(n) == torch.float32 and n in into_conv:
            continue  # TF32 convolutions after it (the module docstring)

        def build(g, m, fn=fn, args=args):
            return [call(g, fn, tuple(m(a) for a in args), {},
                         "normalised by its group's (or plane's) mean and variance, one "
                         "read of a long row where the GPU is full", "normed")]

        found.append(Match(fn.name, {n}, [n], build, f"{what} → {fn.name} (fp32 "
                           "statistics; long rows read once)", ("library_kernel",), set(),
                           (fn,)))
    return found


def _row_statistic(s: Any, x: Any) -> tuple[str, set[fx.Node]] | None:
    """(norm, the nodes computing it) when ``s`` is ``x``'s mean absolute value or L2 norm
    over the last dim, kept as a dim, and read only by the division."""
    xt = tensor(x)
    if xt is None or xt.dim() == 0 or not isinstance(s, fx.Node) or len(s.users) != 1:
        return None
    kind = op(s)
    if kind == "mean":
        a = arg(s, 0, "input")
        if op(a) != "abs" or arg(a, 0, "input") is not x or len(a.users) != 1 or \
                len(a.args) + len(a.kwargs) != 1 or len(s.args) > 3 or \
                set(s.kwargs) - {"input", "dim", "keepdim"}:
            return None
        if not is_last_dim(arg(s, 1, "dim"), xt.dim()) or arg(s, 2, "keepdim") is not True:
            return None
        return "mean_abs", {a, s}
    if kind in ("norm", "vector_norm"):
        names = ("input", "p" if kind == "norm" else "ord", "dim", "keepdim")
        if len(s.args) > 4 or set(s.kwargs) - set(names) - {"out", "dtype"} or \
                any(s.kwargs.get(k) is not None for k in ("out", "dtype")):
            return None
        if arg(s, 0, "input") is not x:
            return None
        p = arg(s, 1, names[1], "fro" if kind == "norm" else 2)
        if not (p == "fro" or number(p) == 2.0):
            return None
        if not is_last_dim(arg(s, 2, "dim"), xt.dim()) or arg(s, 3, "keepdim") is not True:
            return None
        return "l2", {s}
    return None


def find_row_norm(tr: TracedReference) -> list[Match]:
    found = []
    for d in graph_nodes(tr):
        if op(d) != "div" or len(d.args) + len(d.kwargs) != 2 or \
                set(d.kwargs) - {"input", "other"}:
            continue
        x, s = operands(d)
        got = _row_statistic(s, x)
        if got is None or dtype(x) not in FLOATS or shape(d) != shape(x) or \
                dtype(d) != dtype(x) or dtype(s) != dtype(x):
            continue
        norm, nodes = got
        what = ("mean absolute value" if norm == "mean_abs" else "L2 norm")

        def build(g, m, x=x, norm=norm, what=what):
            return [call(g, DIV_BY_ROW_NORM, (m(x), norm), {},
                         f"divided by its row's {what}: one read of a long row where the "
                         "GPU is full", "normed")]

        found.append(Match("row_norm", nodes | {d}, [d], build,
                           f"x / its {what} over the last dim → div_by_row_norm",
                           ("library_kernel", "fusion"), set(), (DIV_BY_ROW_NORM,)))
    return found


GROUP_NORM_PATTERN = Pattern("group_norm", find_group_norm,
                             "GroupNorm and InstanceNorm (instance statistics)")
ROW_NORM_PATTERN = Pattern("row_norm", find_row_norm,
                           "a row divided by its mean |x| or its L2 norm")
