"""``add_rms_norm``, ``rms_norm`` (Llama and Gemma roundings) and ``layer_norm``.

``layer_norm``: ``nn.LayerNorm`` / ``F.layer_norm`` over one or several trailing dims
(``normalized_shape`` a tuple of ints, or of the input's sizes, or a slice of its shape),
weight and bias of that shape in the input's dtype, or none → the library's
``layer_norm``, which reads long rows once by a cooperative launch where they fill the GPU
(``kernels/triton/row_norm.py``: KernelBench's 16 rows of 4M elements), and splits the
other long rows, or too few rows to fill the GPU, over programs in two launches
(``kernels/triton/layernorm_split.py``). GroupNorm, InstanceNorm and the L1/L2 row norms
are ``row_norms.py``'s.

Not covered: a weight or bias in another dtype than the input's (fp32 parameters of a
bf16 input: torch promotes); ``normalized_shape`` that is not the input's trailing dims
(torch raises); LayerNorm written out as mean/var arithmetic.
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
    only_user,
    op,
    operands,
    other_operand,
    shape,
    split_constant,
    squared,
    tensor,
    through_cast,
    val,
)
from solforge.search.patterns.common import (
    ADD_RMS_NORM,
    FLOATS,
    FUSED,
    LAYER_NORM,
    RMS_NORM,
    graph_nodes,
)
from solforge.search.trace import AttrRef, TracedReference


def _vector_param(w: Any, n: int) -> bool:
    return isinstance(w, fx.Node) and w.op == "get_attr" and shape(w) == (n,)


def find_rms_norm(tr: TracedReference) -> list[Match]:
    found = []
    for r in graph_nodes(tr):
        if op(r) != "rsqrt" or len(r.users) != 1:
            continue
        a = arg(r, 0)
        if op(a) != "add" or len(a.users) != 1:
            continue
        mean, eps = split_constant(a)
        if op(mean) != "mean" or len(mean.users) != 1 or \
                arg(mean, 2, "keepdim") is not True:
            continue
        p = arg(mean, 0)
        h = squared(p)
        if h is None or len(p.users) != 1 or tensor(h) is None or \
                not is_last_dim(arg(mean, 1, "dim"), tensor(h).dim()):
            continue
        nm = only_user(r)
        if op(nm) != "mul" or other_operand(nm, r) is not h or len(nm.users) != 1:
            continue
        x, hcast = through_cast(h, torch.float32)
        if x is None or dtype(x) not in FLOATS:
            continue
        n = shape(x)[-1]
        nodes = {p, mean, a, r, nm}
        optional = {hcast} if hcast is not None else set()
        found += [m for m in (_llama(x, n, nm, nodes, optional, eps),
                              _gemma(x, n, nm, nodes, optional, eps)) if m is not None]
    return found


def _llama(x, n, nm, nodes, optional, eps) -> Match | None:
    t = only_user(nm)
    tcast = cast_source(t, dtype(x))
    if tcast is nm and len(t.users) == 1:
        y = only_user(t)
        nodes = nodes | {t}
    elif dtype(x) == torch.float32:
        y, t = t, nm
    else:
        return None
    w = other_operand(y, t) if op(y) == "mul" else None
    if not _vector_param(w, n):
        return None
    return _norm_match(x, w, eps, False, nodes | {y}, optional, y,
                       "Llama RMSNorm (rounded to the input dtype before the weight)")


def _gemma(x, n, nm, nodes, optional, eps) -> Match | None:
    o = only_user(nm)
    if op(o) != "mul" or len(o.users) != 1:
        return None
    w1 = other_operand(o, nm)
    if op(w1) != "add" or len(w1.users) != 1:
        return None
    wf, one = split_constant(w1)
    if number(one) != 1.0 or wf is None:
        return None
    w, wcast = through_cast(wf, torch.float32)
    if not _vector_param(w, n):
        return None
    y = only_user(o)
    if cast_source(y, dtype(x)) is o:
        nodes = nodes | {o, w1, y}
    elif dtype(x) == torch.float32:
        nodes, y = nodes | {o, w1}, o
    else:
        return None
    if wcast is not None:
        nodes = nodes | {wcast}
    return _norm_match(x, w, eps, True, nodes, optional, y,
                       "Gemma RMSNorm (weight stored as an offset: h * (1 + w))")


def _norm_match(x, w, eps, offset, nodes, optional, y, what) -> Match | None:
    if dtype(y) != (dtype(x) if offset else torch.promote_types(dtype(w), dtype(x))):
        return None
    kw = {"offset_weight": True} if offset else {}
    residual = op(x) == "add" and all(
        isinstance(t, fx.Node) and shape(t) == shape(x) and dtype(t) == dtype(x)
        for t in operands(x))
    if residual:
        a, b = operands(x)

        def build_add(g, m):
            r = call(g, ADD_RMS_NORM, (m(a), m(b), m(w), eps), kw,
                     "residual add + RMSNorm in one pass: (normed, new residual)", "fused")
            return [item(g, r, 0, "normed"), item(g, r, 1, "residual_out")]

        return Match("add_rms_norm", nodes | {x}, [y, x], build_add,
                     f"residual add + {what} → add_rms_norm", FUSED, optional,
                     (ADD_RMS_NORM,))

    def build(g, m):
        return [call(g, RMS_NORM, (m(x), m(w), eps), kw, "RMSNorm in one pass per row",
                     "normed")]

    return Match("rms_norm", nodes, [y], build, f"{what} → rms_norm", FUSED, optional,
                 (RMS_NORM,))


def _normalized_shape(ns: Any) -> tuple[int, ...] | None:
    """A ``normalized_shape`` argument's value (a tuple of ints, of size nodes, or a node
    holding a shape such as ``x.shape[1:]``); None when it is not one."""
    v = val(ns) if isinstance(ns, fx.Node) else ns
    if isinstance(v, int) and not isinstance(v, bool):
        return (v,)
    if not isinstance(v, (tuple, list, torch.Size)):
        return None
    dims = [val(d) if isinstance(d, fx.Node) else d for d in v]
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return None
    return tuple(dims)


def find_layer_norm(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        if op(n) != "layer_norm" or tensor(n) is None:
            continue
        x = arg(n, 0)
        if n.op == "call_module":
            mod = n.meta["module"]
            t = str(n.target)
            ns: Any = AttrRef(f"{t}.normalized_shape", tuple(mod.normalized_shape))
            dims = tuple(mod.normalized_shape)
            w = AttrRef(f"{t}.weight", None) if mod.weight is not None else None
            b = AttrRef(f"{t}.bias", None) if getattr(mod, "bias", None) is not None else None
            eps: Any = AttrRef(f"{t}.eps", mod.eps)
            tensors = [p for p in (mod.weight, getattr(mod, "bias", None)) if p is not None]
        else:
            ns = arg(n, 1, "normalized_shape")
            dims = _normalized_shape(ns)
            w, b = arg(n, 2, "weight"), arg(n, 3, "bias")
            eps = arg(n, 4, "eps", 1e-5)
            tensors = [tensor(t) for t in (w, b) if t is not None]
        xt = tensor(x)
        if xt is None or not dims or xt.dim() < len(dims) or \
                tuple(xt.shape[xt.dim() - len(dims):]) != dims:
            continue
        if dtype(x) not in FLOATS or any(t is None or t.dtype != dtype(x) or
                                         tuple(t.shape) != dims for t in tensors):
            continue
        # over the last dim: the call as before; over several, the normalized shape passed
        kw = {} if len(dims) == 1 else {"normalized_shape": ns}
        what = "the last dim" if len(dims) == 1 else f"the last {len(dims)} dims"

        def build(g, m, x=x, w=w, b=b, eps=eps, kw=kw):
            return [call(g, LAYER_NORM, (m(x), m(w), m(b), eps),
                         {k: m(v) for k, v in kw.items()},
                         "LayerNorm: fp32 statistics; one pass per row, long or few rows "
                         "split over programs", "normed")]

        found.append(Match("layer_norm", {n}, [n], build, f"LayerNorm over {what} → "
                           "layer_norm", ("library_kernel",), set(), (LAYER_NORM,)))
    return found


RMS_NORM_PATTERN = Pattern("rms_norm", find_rms_norm,
                           "(residual add +) RMSNorm, Llama and Gemma forms")
LAYER_NORM_PATTERN = Pattern("layer_norm", find_layer_norm, "LayerNorm over the trailing dims")
