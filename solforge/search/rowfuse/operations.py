"""How each operation's node is read into a row-program step: its operands by position or
keyword, whichever way the reference spelled the call (function, method or module), and
the kind and dtype of its result (``classify.py`` holds the kinds; ``kernel_ops.py``
writes the steps as Triton).

Not covered: the keyword arguments each reader checks are the ones that change the
result (``alpha``, ``rounding_mode``, ``inplace``, a reduction's ``dtype``); any other
is refused rather than guessed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx

from solforge.search.nodes import arg, number, operands, tensor
from solforge.search.rowfuse.kernel_ops import BINARY, UNARY, power
from solforge.search.rowfuse.program import Kind, Refused, Value
from solforge.search.trace import AttrRef

_REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "max", "max": "max", "amin": "min",
               "min": "min"}


def _x(c: Any, n: fx.Node, i: int = 0, name: str = "input") -> Value:
    x = c.operand(arg(n, i, name))
    if not isinstance(x, Value):
        raise Refused(f"{n.format_node()}: its operand is no tensor")
    return x


def _no(n: fx.Node, *keys: str, ok: tuple = (None, False)) -> None:
    for k in keys:
        if n.kwargs.get(k, None) not in ok:
            raise Refused(f"{n.format_node()}: {k}={n.kwargs[k]!r} is not covered")


def _module(n: fx.Node) -> Any:
    return n.meta.get("module") if n.op == "call_module" else None


def read_step(c: Any, n: fx.Node, o: str) -> Any:
    """The value ``n`` computes (a :class:`Value`, after recording its step on ``c``, the
    classifier), or :class:`Refused`."""
    if o == "contiguous":
        return _x(c, n)
    if o == "reshape":
        return _view(c, n)
    if o == "cast":
        return _cast(c, n)
    if o in ("max", "min") and isinstance(arg(n, 1, "other"), fx.Node) and \
            tensor(arg(n, 1, "other")) is not None:
        o = "maximum" if o == "max" else "minimum"  # torch.max(a, b): elementwise
    elif o in _REDUCTIONS:
        return _reduction(c, n, o)
    if o in ("softmax", "log_softmax"):
        mod = _module(n)
        dim = mod.dim if mod is not None else arg(n, 1, "dim")
        x = _x(c, n)
        if not _is_last(dim, tensor(n).dim()) or x.kind is not Kind.ROW:
            raise Refused(f"{n.format_node()}: {o} over a dim other than the row's")
        return c.add(n, o, [x], c.combine(n, [x]))
    if o == "layer_norm":
        return _layer_norm(c, n)
    if o == "pow":
        e = arg(n, 1, "exponent")
        if isinstance(e, (AttrRef, fx.Node)) or number(e) is None or \
                power(number(e)) is None:
            raise Refused(f"{n.format_node()}: pow by {e!r} is not written out here")
        x = _x(c, n)
        return c.add(n, "pow", [x], c.combine(n, [x]), exponent=float(number(e)))
    if o == "clamp":
        bounds = [arg(n, 1, "min"), arg(n, 2, "max")]
        if any(isinstance(b, fx.Node) for b in bounds):
            raise Refused(f"{n.format_node()}: clamp by tensors is not covered")
        x = _x(c, n)
        args = [x] + [None if b is None else c.operand(b) for b in bounds]
        return c.add(n, "clamp", args, c.combine(n, [x]))
    if o == "where":
        cond, a, b = (arg(n, 1), arg(n, 0), arg(n, 2)) if n.op == "call_method" else \
            (arg(n, 0, "condition"), arg(n, 1, "input"), arg(n, 2, "other"))
        args = [c.operand(x) for x in (cond, a, b)]
        return c.add(n, "where", args, c.combine(n, args))
    if o == "gelu":
        mod = _module(n)
        approx = mod.approximate if mod is not None else arg(n, 1, "approximate", "none")
        x = _x(c, n)
        name = {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)
        if name is None:
            raise Refused(f"{n.format_node()}: GELU approximate={approx!r}")
        return c.add(n, name, [x], c.combine(n, [x]))
    if o in UNARY:
        mod = _module(n)
        if getattr(mod, "inplace", False) or arg(n, 1, "inplace", False) is True:
            raise Refused(f"{n.format_node()}: in place")
        x = _x(c, n)
        return c.add(n, o, [x], c.combine(n, [x]))
    if o in BINARY:
        _no(n, "rounding_mode")
        _no(n, "alpha", ok=(None, 1))
        args = [c.operand(a) for a in operands(n)]
        return c.add(n, o, args, c.combine(n, args))
    raise Refused(f"{n.format_node()}: {o} is not a row-program operation")


def _is_last(dim: Any, rank: int) -> bool:
    d = number(dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim)
    return d is not None and int(d) % rank == rank - 1


def _view(c: Any, n: fx.Node) -> Value:
    """A view or reshape of a row tensor that merges its leading dims, or keeps them."""
    x, t = _x(c, n), tensor(n)
    if x.kind is not Kind.ROW or t is None or t.shape[-1] != c.n or t.numel() != c.rows * c.n:
        raise Refused(f"{n.format_node()}: a view that is not of rows of {c.n}")
    if t.dim() == 2:
        return replace(x, flat=len(c.lead) > 1)
    if tuple(t.shape) == (*c.lead, c.n):
        return replace(x, flat=False)
    raise Refused(f"{n.format_node()}: a view that splits the leading dims")


def _cast(c: Any, n: fx.Node) -> Value:
    x, t = _x(c, n), tensor(n)
    if t is None or t.dtype == x.dtype:
        return x  # .to(device) or to its own dtype: the same values
    if t.dtype == torch.bool:
        raise Refused(f"{n.format_node()}: a cast to bool")
    return c.add(n, "cast", [x], c.combine(n, [x]))


def _reduction(c: Any, n: fx.Node, o: str) -> Any:
    x = _x(c, n)
    rank = tensor(n.args[0]).dim() if tensor(n.args[0]) is not None else 0
    dim, keepdim = arg(n, 1, "dim"), bool(arg(n, 2, "keepdim", False))
    _no(n, "dtype")
    if dim is None or x.kind is not Kind.ROW:
        raise Refused(f"{n.format_node()}: a reduction over every element or of no row")
    dims = [number(d) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    if any(d is None for d in dims):
        raise Refused(f"{n.format_node()}: reduction dims that are not numbers")
    dims = sorted({int(d) % rank for d in dims})
    kind = _REDUCTIONS[o]
    if dims == [rank - 1]:
        out = Value(n.name, Kind.ROWSTAT, None, keepdim, x.flat)
        if tensor(n) is None:  # max/min with a dim: (values, indices)
            vals = n.meta["val"].values
            return {"values": c.add(n, f"row{kind}", [x], c.expect(n, out, vals))}
        return c.add(n, f"row{kind}", [x], c.expect(n, out))
    if dims == list(range(rank - 1)) and kind in ("sum", "mean") and not keepdim:
        return c.add(n, f"col{kind}", [x], c.expect(n, Value(n.name, Kind.COL, None)))
    raise Refused(f"{n.format_node()}: a reduction over dims {dims} of a rank-{rank} "
                  "tensor (covered: the last, or all leading ones)")


def _layer_norm(c: Any, n: fx.Node) -> Value:
    mod = _module(n)
    x = _x(c, n)
    if mod is not None:
        shape, eps = tuple(mod.normalized_shape), AttrRef(f"{n.target}.eps", mod.eps)
        w, b = [None if getattr(mod, p, None) is None else
                c.param(f"{n.target}.{p}", getattr(mod, p)) for p in ("weight", "bias")]
    else:
        shape = arg(n, 1, "normalized_shape")
        shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
        eps = arg(n, 4, "eps", 1e-5)
        w, b = [None if arg(n, i, k) is None else c.operand(arg(n, i, k))
                for i, k in ((2, "weight"), (3, "bias"))]
    sizes = [c.operand(s).value if isinstance(s, fx.Node) else number(s) for s in shape]
    if x.kind is not Kind.ROW or sizes != [c.n] or \
            any(v is not None and (not isinstance(v, Value) or v.kind is not Kind.COL)
                for v in (w, b)):
        raise Refused(f"{n.format_node()}: a layer norm over more than the row, or with "
                      "weights that are not column vectors")
    return c.add(n, "layer_norm", [x, w, b, c.operand(eps)], c.combine(n, [x]))
