"""Reading the nodes of a traced reference: what a pattern asks of one node.

:func:`op` names a node's operation the same way whichever spelling the reference used
(``torch.add``, ``operator.add`` and ``x.add`` are all ``"add"``; a module leaf such as
``nn.LayerNorm`` is named by its type); :func:`val`, :func:`tensor`, :func:`dtype`,
:func:`shape` and :func:`number` read the example values the tracer recorded, an
attribute's value or a plain constant; :func:`arg` and :func:`operands` read arguments by
position or keyword; the rest answer the small questions patterns share (a cast's source,
a reduction's one dim, the tensor a node squares, a binary node's constant).

Not covered: matching itself (:mod:`solforge.search.match` finds and substitutes; the
patterns in ``solforge.search.patterns`` decide what is exact); operations outside the
three tables below, which :func:`op` reads as ``None`` (convolutions and gemm_f32x3's
unary epilogues are recognised by their patterns); building nodes (``match.call``,
``match.item``); anything the example values cannot tell, such as a tensor's contents.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from solforge.search.trace import AttrRef

_FUNCTIONS: dict[Any, str] = {
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub",
    operator.mul: "mul", torch.mul: "mul", operator.truediv: "div", torch.div: "div",
    torch.true_divide: "div", operator.pow: "pow", torch.pow: "pow", torch.rsqrt: "rsqrt",
    torch.mean: "mean", F.softmax: "softmax", torch.softmax: "softmax",
    F.log_softmax: "log_softmax", torch.log_softmax: "log_softmax",
    torch.matmul: "matmul", operator.matmul: "matmul", torch.bmm: "matmul", torch.mm: "matmul",
    F.silu: "silu", F.gelu: "gelu", torch.cat: "cat", torch.concat: "cat",
    operator.neg: "neg", torch.neg: "neg", torch.transpose: "transpose",
    F.layer_norm: "layer_norm", torch.triu: "triu", torch.full: "full",
    torch.clamp: "clamp", torch.clip: "clamp", torch.abs: "abs", torch.max: "max",
    torch.amax: "amax", torch.min: "min", torch.amin: "amin", torch.unsqueeze: "unsqueeze",
    F.linear: "linear",
    torch.reshape: "reshape", operator.getitem: "getitem", torch.reciprocal: "reciprocal",
    torch.tensor: "tensor", torch.square: "square", F.scaled_dot_product_attention: "sdpa",
    torch.argmax: "argmax", torch.topk: "topk", torch.sum: "sum", torch.argmin: "argmin",
    F.cross_entropy: "cross_entropy",
    torch.masked_fill: "masked_fill", operator.eq: "eq", torch.eq: "eq",
    operator.invert: "not", torch.logical_not: "not", torch.bitwise_not: "not",
    F.dropout: "dropout", F.relu: "relu", torch.relu: "relu",
    F.group_norm: "group_norm", F.instance_norm: "instance_norm", torch.norm: "norm",
    torch.linalg.vector_norm: "vector_norm", torch.sqrt: "sqrt", F.normalize: "normalize",
    torch.cumsum: "cumsum", torch.cumprod: "cumprod", torch.flip: "flip",
    torch.narrow: "narrow", torch.zeros_like: "zeros_like",
    torch.exp: "exp", torch.log: "log", torch.erf: "erf", torch.tanh: "tanh",
    F.tanh: "tanh", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.where: "where",
    torch.maximum: "maximum", torch.minimum: "minimum", operator.gt: "gt", torch.gt: "gt",
    operator.ge: "ge", torch.ge: "ge", operator.lt: "lt", torch.lt: "lt",
    operator.le: "le", torch.le: "le", operator.ne: "ne", torch.ne: "ne",
}
_METHODS = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "rsqrt": "rsqrt",
    "mean": "mean", "softmax": "softmax", "log_softmax": "log_softmax", "matmul": "matmul",
    "mm": "matmul", "bmm": "matmul", "transpose": "transpose",
    "triu": "triu", "clamp": "clamp", "clip": "clamp", "abs": "abs", "max": "max",
    "amax": "amax", "min": "min", "amin": "amin", "unsqueeze": "unsqueeze",
    "reshape": "reshape", "view": "reshape",
    "neg": "neg", "square": "square", "reciprocal": "reciprocal", "expand": "expand",
    "to": "cast", "float": "cast", "half": "cast", "bfloat16": "cast", "double": "cast",
    "type_as": "cast", "type": "cast", "argmax": "argmax", "topk": "topk", "sum": "sum",
    "argmin": "argmin",
    "masked_fill": "masked_fill", "eq": "eq", "logical_not": "not", "bitwise_not": "not",
    "relu": "relu", "norm": "norm", "sqrt": "sqrt",
    "cumsum": "cumsum", "cumprod": "cumprod", "flip": "flip", "narrow": "narrow",
    "exp": "exp", "log": "log", "erf": "erf", "tanh": "tanh", "sigmoid": "sigmoid",
    "maximum": "maximum", "minimum": "minimum", "gt": "gt", "ge": "ge", "lt": "lt",
    "le": "le", "ne": "ne", "where": "where", "contiguous": "contiguous", "size": "size",
}
_MODULES: dict[type, str] = {nn.SiLU: "silu", nn.GELU: "gelu", nn.LayerNorm: "layer_norm",
                             nn.Linear: "linear", nn.Softmax: "softmax",
                             nn.LogSoftmax: "log_softmax", nn.CrossEntropyLoss: "cross_entropy",
                             nn.Dropout: "dropout", nn.ReLU: "relu",
                             nn.BatchNorm1d: "batch_norm", nn.BatchNorm2d: "batch_norm",
                             nn.BatchNorm3d: "batch_norm",
                             nn.MultiheadAttention: "multihead_attention",
                             nn.GroupNorm: "group_norm", nn.InstanceNorm1d: "instance_norm",
                             nn.InstanceNorm2d: "instance_norm",
                             nn.InstanceNorm3d: "instance_norm", nn.Sigmoid: "sigmoid",
                             nn.Tanh: "tanh"}


def op(a: Any) -> str | None:
    """The canonical operation of a node, whichever way the reference spelled it."""
    if not isinstance(a, fx.Node):
        return None
    if a.op == "call_function":
        try:
            return _FUNCTIONS.get(a.target)
        except TypeError:  # an unhashable target
            return None
    if a.op == "call_method":
        name = _METHODS.get(str(a.target))
        if name == "cast" and not isinstance(val(a), torch.Tensor):
            return None
        return name
    if a.op == "call_module":
        mod = a.meta.get("module")
        return _MODULES.get(type(mod)) if mod is not None else None
    return None


def val(a: Any) -> Any:
    """A node's example value, an attribute's value, or the constant itself."""
    if isinstance(a, fx.Node):
        return a.meta.get("val")
    if isinstance(a, AttrRef):
        return a.value
    return a


def number(a: Any) -> float | None:
    v = val(a)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and \
            not isinstance(a, fx.Node):
        return float(v)
    return None


def tensor(a: Any) -> torch.Tensor | None:
    v = val(a) if isinstance(a, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def dtype(a: Any) -> torch.dtype | None:
    t = tensor(a)
    return t.dtype if t is not None else None


def shape(a: Any) -> tuple[int, ...] | None:
    t = tensor(a)
    return tuple(t.shape) if t is not None else None


def arg(n: fx.Node, i: int, name: str | None = None, default: Any = None) -> Any:
    """Argument ``i`` (``self`` of a method is 0) or keyword ``name``."""
    if name is not None and name in n.kwargs:
        return n.kwargs[name]
    return n.args[i] if i < len(n.args) else default


def operands(n: fx.Node) -> tuple[Any, Any]:
    return (arg(n, 0, "input"), arg(n, 1, "other"))


def only_user(n: fx.Node) -> fx.Node | None:
    return next(iter(n.users)) if len(n.users) == 1 else None


def one_dim(dim: Any) -> Any:
    """A reduction's dim argument as one dim (a number or a module attribute: bare, or
    the one item of a list or tuple); None for several dims."""
    if isinstance(dim, (list, tuple)):
        return dim[0] if len(dim) == 1 else None
    return dim


def is_last_dim(dim: Any, rank: int) -> bool:
    d = number(one_dim(dim))
    return d is not None and int(d) in (-1, rank - 1)


def cast_source(n: Any, to: torch.dtype | None = None) -> fx.Node | None:
    """The tensor a cast node converts (to ``to``, when given); None if no cast."""
    if op(n) != "cast":
        return None
    src = n.args[0]
    if not isinstance(src, fx.Node) or tensor(src) is None:
        return None
    if tensor(src).device != tensor(n).device and tensor(n).device.type != "meta":
        return None
    if to is not None and dtype(n) != to:
        return None
    return src


def through_cast(n: Any, to: torch.dtype) -> tuple[Any, fx.Node | None]:
    """``(x, cast)`` when ``n`` is ``x`` cast to ``to``; ``(n, None)`` when ``n`` already
    has that dtype."""
    src = cast_source(n, to)
    if src is not None:
        return src, n
    return (n, None) if dtype(n) == to else (None, None)


def split_constant(n: fx.Node) -> tuple[Any, Any]:
    """``(node, constant)`` of a binary node with one numeric operand."""
    a, b = operands(n)
    if isinstance(a, fx.Node) and number(b) is not None:
        return a, b
    if isinstance(b, fx.Node) and number(a) is not None:
        return b, a
    return None, None


def squared(p: Any) -> Any:
    """The tensor ``p`` squares (``t ** 2``, ``t.pow(2)``, ``torch.square(t)``, ``t * t``);
    None when ``p`` is not a square."""
    if op(p) == "pow" and number(arg(p, 1, "exponent")) == 2.0:
        return arg(p, 0)
    if op(p) == "square":
        return arg(p, 0)
    if op(p) == "mul" and operands(p)[0] is operands(p)[1]:
        return operands(p)[0]
    return None


def other_operand(n: fx.Node, one: Any) -> Any:
    a, b = operands(n)
    if a is one:
        return b
    if b is one:
        return a
    return None
