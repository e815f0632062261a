"""Printing a (rewritten) torch.fx graph as the source of a ``forward`` method.

:func:`forward_source`: one statement per node, named as fx named it; parameters and
submodules read ``self.<name>``, shape reads stay inline (``query.shape[2]``), library
functions are called by their own names (``emit.py`` writes the files around it).

Not covered: graphs holding tensor constants (fx's ``_tensor_constant``: a tensor the
reference computed at trace time from no input) or objects without a source form (those
raise :class:`EmitError`, and no candidate is made of them).
"""

from __future__ import annotations

import builtins
import math
import operator
import textwrap
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from solforge.search.tagged import attribute_source
from solforge.search.trace import AttrRef

# the names emit.py's generated files bind for the reference: its module, its class
REFERENCE = "reference"
REFERENCE_CLS = "Reference"


class EmitError(ValueError):
    """A graph or signature that has no faithful source form here."""


_BINARY = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
    operator.floordiv: "//", operator.mod: "%", operator.pow: "**", operator.matmul: "@",
    operator.and_: "&", operator.or_: "|", operator.xor: "^", operator.lshift: "<<",
    operator.rshift: ">>", operator.lt: "<", operator.le: "<=", operator.gt: ">",
    operator.ge: ">=", operator.eq: "==", operator.ne: "!=", operator.is_: "is",
    operator.is_not: "is not",
}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}

# names the generated module binds at top level; graph values must not shadow them
RESERVED = {"torch", "F", "nn", "math", "self", REFERENCE, REFERENCE_CLS, "ModelNew", "import_file",
            "super", "tuple", "list", "dict", "float", "int", "slice", "getattr", "len"}


def _fn_name(fn: Any, imports: dict[Any, str]) -> str:
    """How a called function is spelled: an imported name, F.x, torch.x, module.x."""
    if fn in imports:
        return imports[fn]
    name = getattr(fn, "__name__", None)
    if name and getattr(F, name, None) is fn:
        return f"F.{name}"
    if name and getattr(torch, name, None) is fn:
        return f"torch.{name}"
    if name and getattr(builtins, name, None) is fn:
        return name
    if name and getattr(math, name, None) is fn:  # size arithmetic: math.sqrt(k.size(-1))
        return f"math.{name}"
    if name and getattr(torch.Tensor, name, None) is fn:
        return f"torch.Tensor.{name}"
    qual = fx.node._get_qualified_name(fn)
    if qual.startswith("torch."):
        return qual
    module, _, attr = qual.rpartition(".")
    if module == "math" and callable(getattr(math, attr, None)):
        # fx's tracer swaps the math module's functions for wrappers while it traces
        # (``autowrap_modules``), in every thread: a search tracing another problem at the
        # same time leaves ``math.sqrt`` a wrapper here, or this graph's target one (an
        # H100 run lost KernelBench 50_ReLUSelfAttention's 3xTF32 rewrite so, session 30)
        return f"math.{attr}"
    raise EmitError(f"the graph calls {qual}, which a generated file cannot import by name")


class _Printer:
    def __init__(self, graph: fx.Graph, imports: dict[Any, str]) -> None:
        self.graph = graph
        self.imports = imports
        self.names: dict[fx.Node, str] = {}
        taken = set(RESERVED) | set(imports.values())
        for n in graph.nodes:
            name = n.name
            while name in taken:
                name += "_"
            taken.add(name)
            self.names[n] = name
        self.inline = {n for n in graph.nodes if self._inlinable(n)}

    @staticmethod
    def _inlinable(n: fx.Node) -> bool:
        """Attribute reads and shape arithmetic read better inline than as variables."""
        if n.op == "get_attr":
            return True
        if n.op == "call_function" and n.target is getattr:
            return True
        if n.op == "call_function" and n.target in (operator.is_, operator.is_not, operator.eq,
                                                      operator.ne):
            # the tracer's guards (a parameter, a size or a device traced as its value)
            return bool(n.users) and all(u.target is torch._assert for u in n.users)
        val = n.meta.get("val")
        if n.op == "call_function" and n.target is operator.getitem and \
                isinstance(val, (int, torch.Size, tuple)) and not isinstance(val, bool):
            base = n.args[0]
            return isinstance(base, fx.Node) and isinstance(base.meta.get("val"),
                                                            (torch.Size, tuple))
        return n.op == "call_method" and n.target in ("size", "dim") and \
            not isinstance(val, torch.Tensor)

    # -- values ------------------------------------------------------------------------
    def arg(self, a: Any, in_index: bool = False) -> str:
        if isinstance(a, fx.Node):
            return self.expr(a) if a in self.inline else self.names[a]
        if isinstance(a, AttrRef):
            return repr(a)  # self.<name>, or an expression of attributes
        if isinstance(a, bool) or a is None or isinstance(a, (int, str)):
            return repr(a)
        if isinstance(a, float):
            if math.isnan(a):
                return "float('nan')"
            if math.isinf(a):
                return "float('inf')" if a > 0 else "-float('inf')"
            return repr(a)
        if a is Ellipsis:
            return "..."
        if isinstance(a, slice):
            parts = ["" if v is None else self.arg(v) for v in (a.start, a.stop, a.step)]
            if in_index:
                return ":".join(parts[:2]) + (f":{parts[2]}" if a.step is not None else "")
            return f"slice({', '.join(self.arg(v) for v in (a.start, a.stop, a.step))})"
        if isinstance(a, (torch.dtype, torch.memory_format, torch.layout)):
            return repr(a)
        if isinstance(a, torch.device):
            return f"torch.device({str(a)!r})"
        if isinstance(a, torch.Size):
            a = tuple(a)
        if isinstance(a, tuple):
            inner = ", ".join(self.arg(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if isinstance(a, list):
            return "[" + ", ".join(self.arg(x) for x in a) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.arg(v)}" for k, v in a.items()) + "}"
        raise EmitError(f"a constant of type {type(a).__name__} has no source form here")

    def call_args(self, args: tuple, kwargs: dict) -> str:
        # F.softmax's _stacklevel only picks the line a deprecation warning points at
        parts = [self.arg(a) for a in args] + [f"{k}={self.arg(v)}" for k, v in kwargs.items()
                                               if k != "_stacklevel"]
        return ", ".join(parts)

    def operand(self, a: Any) -> str:
        text = self.arg(a)
        if isinstance(a, (int, float)) and not isinstance(a, bool) and a < 0:
            return f"({text})"
        return text

    # -- nodes -------------------------------------------------------------------------
    def expr(self, n: fx.Node) -> str:
        if n.op == "get_attr":
            if str(n.target).startswith("_tensor_constant"):
                raise EmitError("the graph holds a tensor the reference made at trace time "
                                "from no input (fx's constant), which a generated file has "
                                "no source for")
            return attribute_source(str(n.target))
        if n.op == "call_module":
            return f"{attribute_source(str(n.target))}({self.call_args(n.args, n.kwargs)})"
        if n.op == "call_method":
            recv, *rest = n.args
            return f"{self.operand(recv)}.{n.target}({self.call_args(tuple(rest), n.kwargs)})"
        if n.op != "call_function":
            raise EmitError(f"unexpected node {n.format_node()}")
        fn, args = n.target, n.args
        if fn is getattr and len(args) == 2 and not n.kwargs:
            return f"{self.operand(args[0])}.{args[1]}"
        if fn is operator.getitem and not n.kwargs:
            idx = args[1]
            if isinstance(idx, tuple) and idx:
                inner = ", ".join(self.arg(x, in_index=True) for x in idx)
            else:
                inner = self.arg(idx, in_index=True)
            return f"{self.operand(args[0])}[{inner}]"
        if fn in _BINARY and len(args) == 2 and not n.kwargs:
            return f"{self.operand(args[0])} {_BINARY[fn]} {self.operand(args[1])}"
        if fn in _UNARY and len(args) == 1 and not n.kwargs:
            return f"{_UNARY[fn]}{self.operand(args[0])}"
        return f"{_fn_name(fn, self.imports)}({self.call_args(args, n.kwargs)})"

    def body(self) -> list[str]:
        lines: list[str] = []
        for n in self.graph.nodes:
            if n.op == "placeholder" or n in self.inline:
                continue
            if n.op == "output":
                lines.append(f"return {self.arg(n.args[0])}")
                continue
            comment = n.meta.get("solforge_comment")
            if comment:
                lines.append(f"# {comment}")
            if n.target is torch._assert and not n.users:
                lines.append(self.expr(n))  # a check: nothing to name
                continue
            lines.append(f"{self.names[n]} = {self.expr(n)}")
        return lines

    def signature(self) -> str:
        params = []
        for n in self.graph.nodes:
            if n.op != "placeholder":
                continue
            name = self.names[n]
            if n.args:
                params.append(f"{name}={self.arg(n.args[0])}")
            else:
                params.append(name)
        return ", ".join(["self", *params])


def forward_source(graph: fx.Graph, imports: dict[Any, str]) -> str:
    """``def forward(...)`` printing ``graph``; ``imports`` maps called objects to the
    names the file imports them under (``torch``, ``F`` and ``math`` are the file's
    own imports)."""
    p = _Printer(graph, imports)
    body = "\n".join(p.body())
    return f"def forward({p.signature()}):\n{textwrap.indent(body, '    ')}\n"
