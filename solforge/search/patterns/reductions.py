"""Reductions that pick: greedy sampling's argmax and MoE routing's softmax + top-k; and
those over a middle dim (``sum_dim``, ``max_dim``).

``argmax``: ``logits.argmax(dim=-1)`` → the library's ``argmax`` (``argmin`` likewise);
over any other dim, or with ``keepdim=True``, → ``argmax_dim`` / ``argmin_dim``.

The last-dim kernel splits a few long rows (batch-1 to batch-64 decoding over a 128k
vocabulary) over many programs, where a generic reduction runs each row on one SM
(``kernels/triton/row_argmax.py``); the other dims' kernel reads contiguous tiles of the
dims after the reduced one and walks it, splitting it over programs when the columns are
too few (``kernels/triton/arg_reduce_dim.py``). Both return what ``torch.argmax`` /
``torch.argmin`` do, ties (the first index) and NaNs (the first NaN's index) included.

Matched: ``torch.argmax(x, dim, keepdim)`` / ``x.argmax(dim, keepdim)`` and the same of
``argmin``, of a non-empty floating-point ``x``, ``dim`` a number (or a module attribute)
within its rank, ``keepdim`` absent, False or True.

``softmax_topk``: ``topk(softmax(x, -1, dtype=float32), k, dim=-1)`` (largest, sorted)
with its values optionally renormalised (``w / w.sum(-1, keepdim=True)``) and cast → the
library's ``softmax_topk``, one launch where eager PyTorch and torch.compile take three to
five (Mixtral's router; ``kernels/triton/router.py``). The softmax must feed only the
top-k, and the values only the renormalisation.

``sum_dim``: ``x.sum(dim)`` / ``x.mean(dim)`` over one dim other than the last (a number
or a module attribute, ``keepdim`` either way), of a floating-point ``x`` → the library's
``sum_dim`` (``kernels/triton/reduce_dim.py``), which
reads contiguous tiles along the kept last dims: an MoE layer's combine of its top-k
expert outputs, a vision encoder's token pooling.

``max_dim``: the values of a maximum over one dim other than the last → the library's
``max_dim`` (``min_dim`` for a minimum; the same kernel as ``sum_dim``): exact, NaN
when the slice has one, of ``0.0`` and ``-0.0`` the first as ``torch.max(x, dim)``
(``amax``'s choice between them follows its reduction order and may differ: equal as
numbers). KernelBench's 49 and 53. Matched:
``torch.amax(x, dim, keepdim)`` / ``x.amax(...)`` with one dim (a number, a module
attribute or a one-element list) and ``torch.max(x, dim, keepdim)`` / ``x.max(dim)``
read through ``[0]`` or ``.values`` only, its indices unread (``v, _ = x.max(1)``
leaves an unused ``[1]``, which goes with the match); ``amin`` and ``min`` likewise.

Not covered: ``dim=None`` (the argmax of the flattened tensor), integer inputs,
``max(dim)`` / ``min(dim)`` whose indices are used (values and indices in one kernel),
``amax`` over several dims, a full ``x.max()``, an elementwise ``torch.max(a, b)``, a
maximum over the last dim (Inductor's row reductions do it well); top-k over more than
4096 experts, ``sorted=False``, sigmoid scoring and grouped routing (DeepSeek-V3); sums over
several dims, with a ``dtype``, and over the last dim (the norm and softmax
patterns take those inside their own forms).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from solforge.search.match import Match, Pattern, call, item
from solforge.search.nodes import (
    arg,
    cast_source,
    dtype,
    is_last_dim,
    number,
    one_dim,
    only_user,
    op,
    tensor,
)
from solforge.search.patterns.common import (
    ARGMAX,
    ARGMAX_DIM,
    ARGMIN,
    ARGMIN_DIM,
    FLOATS,
    MAX_DIM,
    MIN_DIM,
    SOFTMAX_TOPK,
    SUM_DIM,
    first_only,
    graph_nodes,
)
from solforge.search.trace import TracedReference


def find_argmax(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        kind = op(n)
        if kind not in ("argmax", "argmin") or n.op == "call_module" or len(n.args) > 3:
            continue
        if set(n.kwargs) - {"input", "dim", "keepdim"}:
            continue
        x, dim, keepdim = arg(n, 0, "input"), arg(n, 1, "dim"), arg(n, 2, "keepdim", False)
        t = tensor(x)
        if t is None or dtype(x) not in FLOATS or t.dim() == 0 or 0 in t.shape:
            continue
        d = number(dim)
        if d is None or d != int(d) or not -t.dim() <= d < t.dim() or \
                keepdim not in (False, True):
            continue
        minimum = kind == "argmin"
        if is_last_dim(dim, t.dim()) and keepdim is False:
            fn = ARGMIN if minimum else ARGMAX

            def build(g, m, x=x, fn=fn, kind=kind):
                return [call(g, fn, (m(x),), {}, f"{kind} over the last dim, long rows split "
                             "over programs", "ids")]

            what = f"{kind} over the last dim → {fn.name} (few long rows split over many " \
                "programs)"
        else:
            fn = ARGMIN_DIM if minimum else ARGMAX_DIM
            kw = {"keepdim": True} if keepdim else {}

            def build(g, m, x=x, fn=fn, dim=dim, kw=kw, kind=kind):
                return [call(g, fn, (m(x), dim), kw, f"{kind} over a dim: contiguous tiles "
                             "of the dims after it, running extremum per column", "ids")]

            what = f"{kind} over dim {int(d)}" + (", keepdim" if keepdim else "") + \
                f" → {fn.name} (tiles along the kept dims)"
        found.append(Match(kind, {n}, [n], build, what, ("library_kernel",), set(),
                           (fn,)))
    return found


def _renormalised(vals: fx.Node) -> fx.Node | None:
    """``vals / vals.sum(-1, keepdim=True)`` when that is all ``vals`` feeds: the division."""
    if len(vals.users) != 2:
        return None
    total = next((u for u in vals.users if op(u) == "sum"), None)
    div = next((u for u in vals.users if op(u) == "div"), None)
    if total is None or div is None or only_user(total) is not div:
        return None
    # dim and keepdim given by keyword only, as the routers spell them
    if arg(total, 0, "input") is not vals or len(total.args) > 1 or \
            set(total.kwargs) - {"dim", "keepdim"} or not total.kwargs.get("keepdim", False):
        return None
    if not is_last_dim(total.kwargs.get("dim"), tensor(vals).dim()) or \
            arg(div, 0) is not vals or arg(div, 1) is not total:
        return None
    return div


def find_softmax_topk(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        if op(n) != "topk" or n.op == "call_module":
            continue
        sm = arg(n, 0, "input")
        t = tensor(sm)
        if op(sm) != "softmax" or sm.op == "call_module" or t is None or \
                t.dtype != torch.float32 or len(sm.users) != 1:
            continue
        x = arg(sm, 0, "input")
        sm_dim = arg(sm, 1, "dim")
        if len(sm.args) > 2 or dtype(x) not in FLOATS or not is_last_dim(sm_dim, t.dim()):
            continue
        if not is_last_dim(arg(n, 2, "dim", -1), t.dim()) or \
                arg(n, 3, "largest", True) is not True or arg(n, 4, "sorted", True) is not True:
            continue
        items = {arg(u, 1): u for u in n.users if op(u) == "getitem"}
        if len(items) != len(n.users) or set(items) != {0, 1} or t.shape[-1] > 4096:
            continue
        vals, ids = items[0], items[1]
        nodes = {sm, n, vals, ids}
        weights, renorm = vals, _renormalised(vals)
        if renorm is not None:
            nodes |= set(vals.users)
            weights = renorm
        cast = only_user(weights)
        if cast is not None and cast_source(cast) is weights and dtype(cast) in FLOATS:
            nodes.add(cast)
            weights = cast
        k = arg(n, 1, "k")
        kw: dict[str, Any] = {}
        if renorm is not None:
            kw["renormalize"] = True
        if dtype(weights) != torch.float32:
            kw["out_dtype"] = dtype(weights)

        def build(g, m, x=x, k=k, kw=kw):
            r = call(g, SOFTMAX_TOPK, (m(x), m(k) if isinstance(k, fx.Node) else k), kw,
                     "softmax over the experts, top-k and its weights in one launch",
                     "routed")
            return [item(g, r, 0, "weights"), item(g, r, 1, "experts")]

        found.append(Match("softmax_topk", nodes, [weights, ids], build,
                           "softmax, top-k" + (", renormalisation" if renorm is not None
                                               else "") + " of the expert weights → "
                           "softmax_topk (one launch)", ("library_kernel", "fusion"), set(),
                           (SOFTMAX_TOPK,)))
    return found


def _over_a_middle_dim(n: fx.Node, out: fx.Node) -> tuple[Any, Any, int, bool] | None:
    """``(x, dim, dim's number, keepdim)`` of a reduction node ``n`` (``sum``, ``amax``,
    ``max`` read through ``out``) that the middle-dim kernel computes: ``input``, ``dim``
    and ``keepdim`` only (no ``dtype``, no ``out``); one dim, a number or a module
    attribute (KernelBench's ``self.dim``), bare or in a one-element list, within the rank
    and not the last; ``keepdim`` a literal bool; a floating-point ``x`` of two dims or
    more and an ``out`` of its dtype."""
    if n.op == "call_module" or len(n.args) > 3 or \
            set(n.kwargs) - {"input", "dim", "keepdim"}:
        return None
    x, dim, keepdim = arg(n, 0, "input"), arg(n, 1, "dim"), arg(n, 2, "keepdim", False)
    dim = one_dim(dim)
    t, o, d = tensor(x), tensor(out), number(dim)
    if t is None or o is None or dtype(x) not in FLOATS or o.dtype != t.dtype or \
            d is None or d != int(d) or keepdim not in (False, True) or t.dim() < 2 or \
            is_last_dim(dim, t.dim()) or not -t.dim() <= d < t.dim():
        return None
    return x, dim, int(d), keepdim


def find_sum_dim(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        kind = op(n)
        reduced = _over_a_middle_dim(n, n) if kind in ("sum", "mean") else None
        if reduced is None:
            continue
        x, dim, d, keepdim = reduced
        mean = kind == "mean"
        kw = {"mean": True} if mean else {}
        if keepdim:
            kw["keepdim"] = True

        def build(g, m, x=x, dim=dim, kw=kw, mean=mean):
            return [call(g, SUM_DIM, (m(x), dim), kw,
                         ("mean" if mean else "sum") + " over a middle dim, contiguous "
                         "tiles of the last dims", "pooled" if mean else "summed")]

        found.append(Match("sum_dim", {n}, [n], build,
                           f"{kind} over dim {d}" + (", keepdim" if keepdim else "") +
                           " (not the last) → sum_dim (tiles along the kept dims)",
                           ("library_kernel",), set(), (SUM_DIM,)))
    return found


def find_max_dim(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        kind = op(n)
        if kind not in ("max", "min", "amax", "amin"):
            continue
        values, unused = n, set()
        if kind in ("max", "min"):  # (values, indices); a full max or max(a, b) is a tensor
            picked = None if tensor(n) is not None else first_only(n, ("values", "indices"))
            if picked is None:
                continue
            values, unused = picked
        reduced = _over_a_middle_dim(n, values)
        if reduced is None:
            continue
        x, dim, d, keepdim = reduced
        maximum = kind in ("max", "amax")
        fn = MAX_DIM if maximum else MIN_DIM
        kw = {"keepdim": True} if keepdim else {}

        def build(g, m, x=x, dim=dim, kw=kw, fn=fn, maximum=maximum):
            return [call(g, fn, (m(x), dim), kw,
                         ("max" if maximum else "min") + " over a middle dim, contiguous "
                         "tiles of the last dims", "maxima" if maximum else "minima")]

        found.append(Match(fn.name, {n, values} | unused, [values], build,
                           f"{kind} over dim {d}" + (", keepdim" if keepdim else "") +
                           f" (not the last; values only) → {fn.name} (tiles along the "
                           "kept dims)", ("library_kernel",), set(), (fn,)))
    return found


SOFTMAX_TOPK_PATTERN = Pattern("softmax_topk", find_softmax_topk,
                               "MoE routing: softmax, top-k, renormalised")
ARGMAX_PATTERN = Pattern("argmax", find_argmax, "argmax or argmin over one dim")
SUM_DIM_PATTERN = Pattern("sum_dim", find_sum_dim,
                          "sum or mean over a dim other than the last")
MAX_DIM_PATTERN = Pattern("max_dim", find_max_dim,
                          "max or min values over a dim other than the last")
