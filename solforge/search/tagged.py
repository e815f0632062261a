"""Numbers read from a module's attributes, tagged with where they came from, for the
tracer (``trace.py``): a constant that came from ``self.eps`` is printed as ``self.eps``,
and integer arithmetic on such numbers (``self.heads // self.kv_heads``) as its
expression, so a generated ``forward`` stays right for every workload's attributes.

Arithmetic on tagged floats (``+``, ``-``, ``*``, ``/``, ``**``, negation, with ints,
floats and other tagged numbers) keeps its expression too: ``1 - self.top_p`` is emitted
as ``(1 - self.top_p)``, which Python evaluates to the same float when the generated
``forward`` runs. Before, it was baked in as the visible workloads' value (all of them
had top_p 0.9), and a held-out workload with another top_p got a wrong candidate.

Not covered: functions of tagged numbers (``math.sqrt(self.head_dim)``: a plain float), a
plain float on the left of a tagged int (``0.5 * self.heads``: Python's float operator
takes any int before the int subclass is asked),
comparisons and branches (a tagged number compares as the number it is: the branch is
baked in, and the tracer's differential check catches it when workloads differ).
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn


def attribute_source(name: str) -> str:
    """``self.<name>`` as Python: a numbered child (of an ``nn.Sequential`` or
    ``nn.ModuleList``) is indexed, ``downsample.1.weight`` → ``self.downsample[1].weight``
    (``self.downsample.1`` is no Python). An ``nn.ModuleDict`` whose key is a number
    (``"0"``) is indexed the same way, and fails when run (its keys are strings)."""
    return "self" + "".join(f"[{a}]" if a.isdigit() else f".{a}" for a in name.split("."))


class TaggedInt(int):
    """An int read from a module attribute, carrying the attribute's name and its source
    (``self.<attr>``); integer arithmetic on it keeps a tag whose source is the
    expression (and whose ``attr`` is that source without ``self.``, for the record)."""

    def __new__(cls, value: int, attr: str, source: str = "") -> TaggedInt:
        obj = super().__new__(cls, value)
        obj.attr = attr
        obj.source = source or attribute_source(attr)
        return obj

    def _combine(self, other: Any, fn: Any, sym: str, reflected: bool = False) -> Any:
        if isinstance(other, float):  # a float result: tagged as one
            return _float_op(self, other, sym, reflected)
        if type(other) is bool or not isinstance(other, int):
            return NotImplemented  # a proxy or a tensor: its own operator decides
        a = self.source
        b = other.source if isinstance(other, TaggedInt) else repr(int(other))
        left, right = (b, a) if reflected else (a, b)
        x, y = (int(other), int(self)) if reflected else (int(self), int(other))
        src = f"({left} {sym} {right})"
        return TaggedInt(fn(x, y), src.replace("self.", "", 1), src)

    def __add__(self, o: Any) -> Any:
        return self._combine(o, int.__add__, "+")

    def __radd__(self, o: Any) -> Any:
        return self._combine(o, int.__add__, "+", True)

    def __sub__(self, o: Any) -> Any:
        return self._combine(o, int.__sub__, "-")

    def __rsub__(self, o: Any) -> Any:
        return self._combine(o, int.__sub__, "-", True)

    def __mul__(self, o: Any) -> Any:
        return self._combine(o, int.__mul__, "*")

    def __rmul__(self, o: Any) -> Any:
        return self._combine(o, int.__mul__, "*", True)

    def __floordiv__(self, o: Any) -> Any:
        return self._combine(o, int.__floordiv__, "//")

    def _real(self, other: Any, fn: Any, sym: str) -> Any:
        """``self ** other`` or ``self / other`` by an int or a float: a tagged float
        (``self.head_dim ** -0.5``), or a tagged int where the result is one."""
        if type(other) is bool or not isinstance(other, (int, float)):
            return NotImplemented
        b = other.source if isinstance(other, (TaggedInt, TaggedFloat)) else repr(other)
        src = f"({self.source} {sym} {b})"
        v = fn(int(self), other if type(other) in (int, float) else plain(other))
        if type(v) is int:
            return TaggedInt(v, src.replace("self.", "", 1), src)
        if type(v) is float:
            return TaggedFloat(v, src.replace("self.", "", 1), src)
        return v  # complex (a negative base to a fractional power): plain

    def __pow__(self, o: Any, mod: Any = None) -> Any:
        if mod is not None:
            return int.__pow__(int(self), o, mod)
        return self._real(o, lambda x, y: x ** y, "**")

    def __truediv__(self, o: Any) -> Any:
        return self._real(o, lambda x, y: x / y, "/")

    def __rfloordiv__(self, o: Any) -> Any:
        return self._combine(o, int.__floordiv__, "//", True)


class TaggedFloat(float):
    """A float read from a module attribute, carrying the attribute's name and source;
    or a float computed from tagged numbers, carrying its expression."""

    def __new__(cls, value: float, attr: str, source: str = "") -> TaggedFloat:
        obj = super().__new__(cls, value)
        obj.attr = attr
        obj.source = source or attribute_source(attr)
        return obj

    def __add__(self, o: Any) -> Any:
        return _float_op(self, o, "+")

    def __radd__(self, o: Any) -> Any:
        return _float_op(self, o, "+", True)

    def __sub__(self, o: Any) -> Any:
        return _float_op(self, o, "-")

    def __rsub__(self, o: Any) -> Any:
        return _float_op(self, o, "-", True)

    def __mul__(self, o: Any) -> Any:
        return _float_op(self, o, "*")

    def __rmul__(self, o: Any) -> Any:
        return _float_op(self, o, "*", True)

    def __truediv__(self, o: Any) -> Any:
        return _float_op(self, o, "/")

    def __rtruediv__(self, o: Any) -> Any:
        return _float_op(self, o, "/", True)

    def __pow__(self, o: Any, mod: Any = None) -> Any:
        if mod is not None:
            return NotImplemented
        return _float_op(self, o, "**")

    def __rpow__(self, o: Any) -> Any:
        return _float_op(self, o, "**", True)

    def __neg__(self) -> Any:
        src = f"(-{self.source})"
        return TaggedFloat(-float(self), src.replace("self.", "", 1), src)


_FLOAT_OPS = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__,
              "/": float.__truediv__, "**": float.__pow__}


def _float_op(tagged: TaggedInt | TaggedFloat, other: Any, sym: str,
              reflected: bool = False) -> Any:
    """``tagged <sym> other`` (``other <sym> tagged`` when ``reflected``) with a float
    result: a tagged float carrying the expression, computed as Python computes it at
    run time (the operands as plain numbers, in the same order); NotImplemented for an
    operand that is no number (a proxy, a tensor: its own operator decides)."""
    if type(other) is bool or not isinstance(other, (int, float)):
        return NotImplemented
    a = tagged.source
    b = other.source if isinstance(other, (TaggedInt, TaggedFloat)) else repr(plain(other))
    left, right = (b, a) if reflected else (a, b)
    x, y = (plain(other), plain(tagged)) if reflected else (plain(tagged), plain(other))
    try:
        v = x ** y if sym == "**" else _FLOAT_OPS[sym](float(x), y)
    except ZeroDivisionError:
        return NotImplemented  # Python's own operator raises it again, untagged
    if type(v) is not float:  # complex (a negative base to a fractional power)
        return v
    src = f"({left} {sym} {right})"
    return TaggedFloat(v, src.replace("self.", "", 1), src)


def tag_attributes(model: nn.Module) -> nn.Module:
    """Replace every int/float attribute of the (throwaway, traced) module tree by a tagged
    copy; integer arithmetic between tagged ints and ints keeps a tag (its expression),
    anything else (floats, powers, division) gives a plain number again."""
    for prefix, mod in model.named_modules():
        for k, v in list(vars(mod).items()):
            if k.startswith("_") or k == "training" or type(v) not in (int, float):
                continue
            name = f"{prefix}.{k}" if prefix else k
            tagged = TaggedInt(v, name) if type(v) is int else TaggedFloat(v, name)
            object.__setattr__(mod, k, tagged)
    return model


def plain(v: Any) -> Any:
    """A tagged number as the plain int or float it stands for."""
    if isinstance(v, TaggedInt):
        return int(v)
    if isinstance(v, TaggedFloat):
        return float(v)
    return v
