"""``fp8_quant_per_group`` / ``fp8_quant_per_tensor``: e4m3 quantization with its scales."""

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
    op,
    operands,
    shape,
    tensor,
    through_cast,
)
from solforge.search.patterns.common import (
    FLOATS,
    FP8,
    FP8_PER_GROUP,
    FP8_PER_TENSOR,
    FUSED,
    graph_nodes,
)
from solforge.search.trace import TracedReference


def _clamp_448(n: Any) -> Any:
    """The clamped tensor of ``clamp(t, min=-448, max=448)``, else None."""
    if op(n) != "clamp":
        return None
    lo, hi = number(arg(n, 1, "min")), number(arg(n, 2, "max"))
    return arg(n, 0) if (lo, hi) == (-448.0, 448.0) else None


def _abs_of(n: Any) -> Any:
    return arg(n, 0) if op(n) == "abs" and len(n.users) == 1 else None


def find_fp8_quant(tr: TracedReference) -> list[Match]:
    found = []
    for qn in graph_nodes(tr):
        if dtype(qn) != FP8 or cast_source(qn) is None:
            continue
        c = cast_source(qn)
        y = _clamp_448(c)
        if y is None or len(c.users) != 1 or len(y.users) != 1:
            continue
        m = _per_group(qn, c, y) if op(y) == "div" else _per_tensor(qn, c, y)
        if m is not None:
            found.append(m)
    return found


def _per_group(qn: fx.Node, c: fx.Node, d: fx.Node) -> Match | None:
    xg, sx = operands(d)
    if op(sx) != "div" or number(operands(sx)[1]) != 448.0 or dtype(sx) != torch.float32:
        return None
    a = operands(sx)[0]
    ac = cast_source(a, torch.float32) or a
    if op(ac) != "clamp" or arg(ac, 2, "max") is not None or number(arg(ac, 1, "min")) is None:
        return None
    eps = arg(ac, 1, "min")
    am = arg(ac, 0)
    nodes = {qn, c, d, sx, ac, am} | ({a} if a is not ac else set())
    if op(am) == "getitem" and arg(am, 1) == 0:
        red = arg(am, 0)
        nodes.add(red)
    else:
        red = am
    if op(xg) != "reshape" or tensor(xg) is None or tensor(xg).dim() != 2:
        return None
    if op(red) not in ("max", "amax") or not is_last_dim(arg(red, 1, "dim"), 2) or \
            arg(red, 2, "keepdim") is not True or _abs_of(arg(red, 0)) is not xg:
        return None
    nodes.add(arg(red, 0))
    x = arg(xg, 0)
    group = xg.args[-1]
    g = number(group)
    xs = shape(x)
    if g is None or xs is None or int(g) & (int(g) - 1) or xs[-1] % int(g) or \
            dtype(x) not in FLOATS:
        return None

    def build(gr, m):
        r = call(gr, FP8_PER_GROUP, (m(x), group), {"eps": eps},
                 "1 x group fp8 quantization with its scales, one pass", "quantized")
        q, s = item(gr, r, 0, "q"), item(gr, r, 1, "scales")
        # as the reference's [rows * groups, group] and [rows * groups, 1] views
        return [gr.call_method("view", (q, -1, group)), gr.call_method("view", (s, -1, 1))]

    return Match("fp8_quant_per_group", nodes, [qn, sx], build,
                 f"per-group (1 x {int(g)}) fp8 e4m3 quantization → fp8_quant_per_group",
                 FUSED, {xg}, (FP8_PER_GROUP,))


def _per_tensor(qn: fx.Node, c: fx.Node, y: fx.Node) -> Match | None:
    if op(y) != "mul":
        return None
    for xf, inv in (operands(y), operands(y)[::-1]):
        x, xcast = through_cast(xf, torch.float32)
        if x is None or op(inv) != "div" or len(inv.users) != 1:
            continue
        one, sc = operands(inv)
        if not (number(one) == 1.0 or (op(one) == "tensor" and number(arg(one, 0)) == 1.0)):
            continue
        if op(sc) != "div" or number(operands(sc)[1]) != 448.0 or shape(sc) != ():
            continue
        amax = operands(sc)[0]
        am, acast = through_cast(amax, torch.float32)
        if op(am) != "max" or len(am.args) != 1 or am.kwargs or _abs_of(arg(am, 0)) is not x:
            continue
        nodes = {qn, c, y, inv, sc, am, arg(am, 0)} | {n for n in (acast,) if n is not None}
        optional = {n for n in (xcast,) if n is not None}
        if isinstance(one, fx.Node):
            optional.add(one)

        def build(g, m, x=x):
            r = call(g, FP8_PER_TENSOR, (m(x),), {},
                     "dynamic per-tensor fp8 quantization: amax, then one scaling pass",
                     "quantized")
            # the library's scale is [1]; the reference's is a 0-d tensor until it views it
            return [item(g, r, 0, "q"), g.call_method("view", (item(g, r, 1, "scale"), ()))]

        return Match("fp8_quant_per_tensor", nodes, [qn, sc], build,
                     "dynamic per-tensor fp8 e4m3 quantization → fp8_quant_per_tensor",
                     FUSED, optional, (FP8_PER_TENSOR,))
    return None


FP8_QUANT_PATTERN = Pattern("fp8_quant", find_fp8_quant,
                            "fp8 e4m3 quantization per tensor / per group")
