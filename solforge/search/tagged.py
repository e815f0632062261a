"""Numbers read from a module's attributes, tagged with where they came from, for the
tracer (``trace.py``): a constant that came from ``self.eps`` is printed as ``self.eps``,
and integer arithmetic on such numbers (``self.heads // self.kv_heads``) as its
expression, so a generated ``forward`` stays right for every workload's attributes.

Not covered: arithmetic on tagged floats (the result is a plain float), comparisons and
branches (a tagged int compares as the int it is: the branch is baked in, and the
tracer's differential check catches it when workloads differ).
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
        if type(other) is bool or not isinstance(other, int):
            return NotImplemented  # a float or a proxy: its own operator decides
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
    or a float computed from a tagged int (``**``, ``/``), carrying its expression.
    Arithmetic on it gives a plain float."""

    def __new__(cls, value: float, attr: str, source: str = "") -> TaggedFloat:
        obj = super().__new__(cls, value)
        obj.attr = attr
        obj.source = source or attribute_source(attr)
        return obj


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
