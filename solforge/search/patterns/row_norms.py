"""``group_norm`` (GroupNorm and InstanceNorm), ``row_norm`` (a row divided by its mean
absolute value or its L2 norm) and ``dim_norm`` (the same, or by its root mean square,
over a dim with others after it): normalisations by a statistic → the library's
``row_norm`` kernels, which read a long row once where the GPU is full
(``kernels/triton/row_norm.py``, ``cooperative``), and ``div_by_dim_norm``
(``kernels/triton/dim_norm.py``).

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
39_L2Norm_) → ``div_by_row_norm(x, "l2")``, and ``F.normalize(x, p=2, dim=-1, eps)`` →
``div_by_row_norm(x, "l2", eps)`` (the norm clamped to eps); over the last dim, written by
dim -1 or the last index, the reduction read only by the division, no ``dtype``.

``dim_norm``: over one dim that has others after it (a number or a module attribute, or a
list of one; ``keepdim=True``), ``x`` divided by its mean absolute value or L2 norm as
above, by its root mean square ``torch.sqrt(torch.mean(x ** 2, dim, keepdim=True) + eps)``
(the square also as ``x.pow(2)``, ``torch.square(x)``, ``x * x``; KernelBench's
36_RMSNorm_ over channels) → ``div_by_dim_norm(x, dim, "rms", eps)``, or
``F.normalize(x, p=2, dim, eps)`` → ``div_by_dim_norm(x, dim, "l2", eps)``. An fp32 result
that reaches a convolution is left to PyTorch (TF32 there, as below).

Not covered: InstanceNorm with running statistics (``track_running_stats=True``) or an
unbatched input; subclasses of the modules; parameters in another dtype than the input's;
GroupNorm followed by its activation fused (SiLU after it stays a separate ``bias_act``);
over the last dim, RMS normalisation without a weight (``rms_norm`` in ``norms.py`` takes
the weighted one); norms over several dims; the multiplication by ``torch.rsqrt(...)``
over a middle dim (it rounds differently from the division by ``sqrt``); norms written as
``sqrt(sum(x ** 2))``; ``p`` other than 2.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn

from solforge.search.match import Match, Pattern, call
from solforge.search.nodes import (
    arg,
    dtype,
    is_last_dim,
    number,
    one_dim,
    op,
    operands,
    shape,
    split_constant,
    squared,
    tensor,
)
from solforge.search.patterns.common import (
    DIV_BY_DIM_NORM,
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


def _kept(s: fx.Node, names: tuple[str, ...], dim_at: int) -> Any:
    """The one dim a reduction ``s`` runs over, kept (``keepdim=True``), with no
    other keyword than ``names``; None otherwise."""
    if len(s.args) > len(names) or set(s.kwargs) - set(names) or \
            arg(s, dim_at + 1, "keepdim") is not True:
        return None
    return one_dim(arg(s, dim_at, "dim"))


def _statistic(s: Any, x: Any) -> tuple[str, Any, Any, set[fx.Node]] | None:
    """(norm, dim, eps, the nodes computing it) when ``s`` is one of ``x``'s statistics over
    one dim, kept as a dim and read only by the division: its mean absolute value, its L2
    norm (eps None), or its root mean square plus ``eps`` (``sqrt(mean(x ** 2) + eps)``)."""
    xt = tensor(x)
    if xt is None or xt.dim() == 0 or not isinstance(s, fx.Node) or len(s.users) != 1:
        return None
    kind = op(s)
    if kind == "mean":
        a = arg(s, 0, "input")
        if op(a) != "abs" or arg(a, 0, "input") is not x or len(a.users) != 1 or \
                len(a.args) + len(a.kwargs) != 1:
            return None
        dim = _kept(s, ("input", "dim", "keepdim"), 1)
        return None if dim is None else ("mean_abs", dim, None, {a, s})
    if kind in ("norm", "vector_norm"):
        names = ("input", "p" if kind == "norm" else "ord", "dim", "keepdim")
        if any(s.kwargs.get(k) is not None for k in ("out", "dtype")) or arg(s, 0) is not x:
            return None
        p = arg(s, 1, names[1], "fro" if kind == "norm" else 2)
        if not (p == "fro" or number(p) == 2.0):
            return None
        kw = {k: v for k, v in s.kwargs.items() if k not in ("out", "dtype")}
        if len(s.args) > 4 or set(kw) - set(names):
            return None
        dim = _kept(s, names + ("out", "dtype"), 2)
        return None if dim is None else ("l2", dim, None, {s})
    if kind == "sqrt":
        a = arg(s, 0)
        if op(a) != "add" or len(a.users) != 1 or len(s.args) + len(s.kwargs) != 1:
            return None
        mean, eps = split_constant(a)
        if op(mean) != "mean" or len(mean.users) != 1:
            return None
        sq = arg(mean, 0, "input")
        if squared(sq) is not x or len(sq.users) != 1:
            return None
        dim = _kept(mean, ("input", "dim", "keepdim"), 1)
        return None if dim is None else ("rms", dim, eps, {sq, mean, a, s})
    return None


def _after_dim(x: Any, dim: Any) -> int | None:
    """How many elements the dims after ``dim`` of ``x`` hold (1 for the last dim); None
    for a dim that is not one of ``x``'s."""
    xt, d = tensor(x), number(dim)
    if xt is None or d is None or d != int(d) or not -xt.dim() <= d < xt.dim():
        return None
    return math.prod(xt.shape[int(d) % xt.dim() + 1:])


def _normalize_call(n: fx.Node) -> tuple[Any, Any, Any] | None:
    """``(x, dim, eps)`` of ``F.normalize(x, p=2, dim, eps)`` with no ``out``."""
    if len(n.args) > 4 or set(n.kwargs) - {"input", "p", "dim", "eps", "out"} or \
            n.kwargs.get("out") is not None:
        return None
    p, eps = arg(n, 1, "p", 2.0), arg(n, 3, "eps", 1e-12)
    if number(p) != 2.0 or number(eps) is None:
        return None
    return arg(n, 0, "input"), arg(n, 2, "dim", 1), eps


def _normalisations(tr: TracedReference):
    """``(output node, x, norm, dim, eps, the nodes replaced)`` for every ``x /
    statistic(x)`` and every ``F.normalize(x, p=2, dim, eps)`` (``"l2"`` with its eps)."""
    for d in graph_nodes(tr):
        if op(d) == "normalize":
            got = _normalize_call(d)
            if got is not None and dtype(got[0]) in FLOATS and dtype(d) == dtype(got[0]) \
                    and shape(d) == shape(got[0]):
                x, dim, eps = got
                yield d, x, "l2", one_dim(dim), eps, {d}
            continue
        if op(d) != "div" or len(d.args) + len(d.kwargs) != 2 or \
                set(d.kwargs) - {"input", "other"}:
            continue
        x, s = operands(d)
        got = _statistic(s, x)
        if got is None or dtype(x) not in FLOATS or shape(d) != shape(x) or \
                dtype(d) != dtype(x) or dtype(s) != dtype(x):
            continue
        norm, dim, eps, nodes = got
        yield d, x, norm, dim, eps, nodes | {d}


_WHAT = {"mean_abs": "mean absolute value", "l2": "L2 norm", "rms": "root mean square"}


def _what(d: fx.Node, norm: str) -> str:
    return _WHAT[norm] + (" clamped to eps (F.normalize)" if op(d) == "normalize" else "")


def find_row_norm(tr: TracedReference) -> list[Match]:
    found = []
    for d, x, norm, dim, eps, nodes in _normalisations(tr):
        if norm == "rms" or not is_last_dim(dim, tensor(x).dim()):
            continue  # the other dims are find_dim_norm's
        what = _what(d, norm)
        args = (x, norm) + (() if eps is None else (eps,))

        def build(g, m, args=args, what=what):
            return [call(g, DIV_BY_ROW_NORM, tuple(m(a) for a in args), {},
                         f"divided by its row's {what}: one read of a long row where the "
                         "GPU is full", "normed")]

        found.append(Match("row_norm", nodes, [d], build,
                           f"x / its {what} over the last dim → div_by_row_norm",
                           ("library_kernel", "fusion"), set(), (DIV_BY_ROW_NORM,)))
    return found


def find_dim_norm(tr: TracedReference) -> list[Match]:
    found = []
    into_conv = reaching_a_conv(tr)
    for d, x, norm, dim, eps, nodes in _normalisations(tr):
        after = _after_dim(x, dim)
        if after is None or after == 1 or tensor(x).dim() < 2:
            continue  # over the last dim: the row kernels' (find_row_norm)
        if dtype(d) == torch.float32 and d in into_conv:
            continue  # TF32 convolutions after it (the module docstring)
        what = _what(d, norm)
        args = (x, dim, norm) + (() if eps is None else (eps,))

        def build(g, m, args=args, what=what):
            return [call(g, DIV_BY_DIM_NORM, tuple(m(a) for a in args), {},
                         f"divided by its {what} over a dim with others after it: each "
                         "column tile read once", "normed")]

        found.append(Match("dim_norm", nodes, [d], build,
                           f"x / its {what} over dim {int(number(dim))} (not the last) → "
                           "div_by_dim_norm", ("library_kernel", "fusion"), set(),
                           (DIV_BY_DIM_NORM,)))
    return found


GROUP_NORM_PATTERN = Pattern("group_norm", find_group_norm,
                             "GroupNorm and InstanceNorm (instance statistics)")
ROW_NORM_PATTERN = Pattern("row_norm", find_row_norm,
                           "a row divided by its mean |x| or its L2 norm")
DIM_NORM_PATTERN = Pattern("dim_norm", find_dim_norm,
                           "x divided by its RMS, L2 norm or mean |x| over a middle dim")
