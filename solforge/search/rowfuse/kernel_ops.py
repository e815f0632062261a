"""Each row-program operation as Triton source: :func:`step_lines` writes the lines that
compute one :class:`~solforge.search.rowfuse.program.Step` in fp32 (the generator rounds
the result to the reference's 16-bit dtype after it, as eager PyTorch rounds every op).

Inside a program's loop a row value is a ``[BLOCK_M, BLOCK_N]`` tile of ``BLOCK_M`` rows,
a per-row value ``[BLOCK_M, 1]``, a column value ``[1, BLOCK_N]``; they broadcast against
each other. ``mask`` marks the tile's real lanes (columns below ``N``, the row length, of
rows the program owns): masked lanes hold 0 (loads' ``other``) or whatever a function makes
of it, so every reduction over a row masks them first (0 for a sum, -inf for a max) and
reduces along ``axis=1``, keeping the result ``[BLOCK_M, 1]``. A row past the program's
last is all masked: its reductions give 0 or -inf (a softmax there NaN), never stored.

Not covered: fp64 math; ``pow`` by an integer exponent beyond 4 in magnitude or by a
module number (refused by the classifier); NaN propagation of ``maximum``, ``clamp`` and
``relu``, which follow Triton's min/max rather than PyTorch's NaN-first rule.
"""

from __future__ import annotations

from collections.abc import Callable

from solforge.search.rowfuse.program import Const, Operand, Step, Value

UNARY: dict[str, str] = {
    "neg": "-{0}", "rsqrt": "tl.rsqrt({0})", "sqrt": "tl.sqrt({0})", "exp": "tl.exp({0})",
    "log": "tl.log({0})", "erf": "tl.erf({0})", "tanh": "_tanh({0})",
    "sigmoid": "tl.sigmoid({0})", "silu": "{0} * tl.sigmoid({0})",
    "relu": "tl.maximum({0}, 0.0)", "abs": "tl.abs({0})", "reciprocal": "1.0 / {0}",
    "square": "{0} * {0}",
    # PyTorch's GELU formulas; tanh through exp (Triton's core has no tanh)
    "gelu": "0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476))",
    "gelu_tanh": "0.5 * {0} * (1.0 + _tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * "
                 "{0} * {0})))",
}
BINARY: dict[str, str] = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
    "maximum": "tl.maximum({0}, {1})", "minimum": "tl.minimum({0}, {1})",
    "gt": "{0} > {1}", "ge": "{0} >= {1}", "lt": "{0} < {1}", "le": "{0} <= {1}",
    "eq": "{0} == {1}", "ne": "{0} != {1}",
}
# x ** e for the exponents written out (PyTorch's pow(x, 2) is x * x too)
_POWERS = {1.0: "{0}", 2.0: "{0} * {0}", 3.0: "{0} * {0} * {0}", 4.0: "({0} * {0}) * ({0} * {0})",
           0.5: "tl.sqrt({0})", -0.5: "tl.rsqrt({0})", -1.0: "1.0 / {0}",
           -2.0: "1.0 / ({0} * {0})"}


def text(a: Operand) -> str:
    """An operand as Triton source: a value's name, a number (parenthesised if negative)."""
    if isinstance(a, Value):
        return a.name
    t = a.text
    if t == "True" or t == "False":
        return t
    return f"({t})" if t.startswith("-") else t


def power(exponent: float) -> str | None:
    """The template of ``x ** exponent``; None for one not written out here."""
    if exponent in _POWERS:
        return _POWERS[exponent]
    if exponent != int(exponent):  # exp2(e * log2 x): NaN below 0 as PyTorch's pow
        return f"tl.exp2({exponent!r} * tl.log2({{0}}))"
    return None


_NEG_INF, _INF = 'float("-inf")', 'float("inf")'


def _masked(x: str, fill: str) -> str:
    return f"tl.where(mask, {x}, {fill})"


def _row(fn: str, x: str) -> str:
    """``tl.<fn>`` of each row of the tile ``x``, as a ``[BLOCK_M, 1]`` column."""
    return f"tl.{fn}({x}, axis=1)[:, None]"


def _reduction(s: Step, a: list[str]) -> list[str]:
    x, out = a[0], s.out.name
    return [{
        "rowsum": f"{out} = {_row('sum', _masked(x, '0.0'))}",
        "rowmean": f"{out} = {_row('sum', _masked(x, '0.0'))} / N",
        "rowmax": f"{out} = {_row('max', _masked(x, _NEG_INF))}",
        "rowmin": f"{out} = {_row('min', _masked(x, _INF))}",
    }[s.op]]


def _softmax(s: Step, a: list[str]) -> list[str]:
    x, out = a[0], s.out.name
    lines = [f"{out}_shift = {x} - {_row('max', _masked(x, _NEG_INF))}",
             f"{out}_exp = {_masked(f'tl.exp({out}_shift)', '0.0')}"]
    if s.op == "softmax":
        return lines + [f"{out} = {out}_exp / {_row('sum', f'{out}_exp')}"]
    return lines + [f"{out} = {out}_shift - tl.log({_row('sum', f'{out}_exp')})"]


def _layer_norm(s: Step, a: list[str]) -> list[str]:
    # args: x, weight or None, bias or None, eps (PyTorch: biased variance, fp32 math)
    x, w, b, eps, out = a[0], a[1], a[2], a[3], s.out.name
    lines = [f"{out}_mean = {_row('sum', _masked(x, '0.0'))} / N",
             f"{out}_diff = {_masked(f'{x} - {out}_mean', '0.0')}",
             f"{out}_rstd = tl.rsqrt({_row('sum', f'{out}_diff * {out}_diff')} / N + {eps})"]
    y = f"{out}_diff * {out}_rstd"
    if w != "None":
        y += f" * {w}"
    if b != "None":
        y += f" + {b}"
    return lines + [f"{out} = {y}"]


def _clamp(s: Step, a: list[str]) -> list[str]:
    y = a[0]
    if a[1] != "None":
        y = f"tl.maximum({y}, {a[1]})"
    if a[2] != "None":
        y = f"tl.minimum({y}, {a[2]})"
    return [f"{s.out.name} = {y}"]


def _cast(s: Step, a: list[str]) -> list[str]:
    # between float dtypes the value is already fp32: the generator rounds it to the
    # target; a bool mask becomes 0.0 / 1.0
    src = s.args[0]
    if isinstance(src, Value) and src.dtype is not None and src.dtype.is_floating_point is False:
        return [f"{s.out.name} = {a[0]}.to(tl.float32)"]
    return [f"{s.out.name} = {a[0]}"]


_SPECIAL: dict[str, Callable[[Step, list[str]], list[str]]] = {
    **dict.fromkeys(("rowsum", "rowmean", "rowmax", "rowmin"), _reduction),
    "softmax": _softmax, "log_softmax": _softmax, "layer_norm": _layer_norm,
    "clamp": _clamp, "cast": _cast,
    "where": lambda s, a: [f"{s.out.name} = tl.where({a[0]}, {a[1]}, {a[2]})"],
    "pow": lambda s, a: [f"{s.out.name} = " + power(s.option("exponent")).format(a[0])],
}


def step_lines(s: Step) -> list[str]:
    """The lines computing ``s.out`` (a column reduction's accumulation is the
    generator's: it is not a per-row value)."""
    a = [text(x) if x is not None else "None" for x in s.args]
    if s.op in _SPECIAL:
        return _SPECIAL[s.op](s, a)
    template = UNARY.get(s.op) or BINARY.get(s.op)
    if template is None:
        raise KeyError(f"no Triton form for {s.op!r}")
    return [f"{s.out.name} = " + template.format(*a)]
