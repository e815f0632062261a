"""``swiglu`` / ``geglu``, ``softmax`` and ``log_softmax`` (with its cast) and ``bias_act``."""

from __future__ import annotations

from typing import Any

import torch.fx as fx
import torch.nn.functional as F

from solforge.search.match import Match, Pattern, call
from solforge.search.nodes import (
    arg,
    cast_source,
    dtype,
    is_last_dim,
    only_user,
    op,
    operands,
    shape,
    tensor,
)
from solforge.search.patterns.common import (
    BIAS_ACT,
    FLOATS,
    FUSED,
    GEGLU,
    LOG_SOFTMAX,
    SOFTMAX,
    SWIGLU,
    graph_nodes,
)
from solforge.search.trace import AttrRef, TracedReference


def _activation(n: Any) -> str | None:
    """gelu, gelu_tanh or silu, as the library names them."""
    kind = op(n)
    if kind == "silu":
        return "silu"
    if kind != "gelu":
        return None
    mod = n.meta.get("module") if n.op == "call_module" else None
    approx = mod.approximate if mod is not None else arg(n, 1, "approximate", "none")
    return {"none": "gelu", "tanh": "gelu_tanh"}.get(approx)


def find_glu(tr: TracedReference) -> list[Match]:
    found = []
    for out in graph_nodes(tr):
        if op(out) != "mul":
            continue
        for act, up in (operands(out), operands(out)[::-1]):
            kind = _activation(act)
            if kind not in ("silu", "gelu_tanh") or len(act.users) != 1:
                continue
            gate = arg(act, 0)
            if not isinstance(up, fx.Node) or shape(gate) != shape(up) or \
                    shape(up) != shape(out) or not dtype(gate) == dtype(up) == dtype(out) or \
                    dtype(out) not in FLOATS:
                continue
            fn = SWIGLU if kind == "silu" else GEGLU

            def build(g, m, fn=fn, gate=gate, up=up):
                return [call(g, fn, (m(gate), m(up)), {},
                             f"{fn.name}: the gate's activation and the product in one pass",
                             "gated")]

            found.append(Match(fn.name, {out, act}, [out], build,
                               f"{kind}(gate) * up → {fn.name}", FUSED, set(), (fn,)))
            break
    return found


def find_softmax(tr: TracedReference) -> list[Match]:
    """softmax or log_softmax over the last dim, with the cast after it when there is one."""
    found = []
    for n in graph_nodes(tr):
        kind = op(n)
        if kind not in ("softmax", "log_softmax") or tensor(n) is None:
            continue
        if n.op == "call_module":
            dim = n.meta["module"].dim
        else:
            dim = arg(n, 1, "dim")
            functional = n.target in (F.softmax, F.log_softmax)
            if len(n.args) > (3 if functional else 2):
                continue  # a positional dtype: read it no further
        x = arg(n, 0)
        # softmax(x, dtype=f32) computes in fp32 as the kernel does; a float64 one does not
        if dim is None or dtype(x) not in FLOATS or dtype(n) not in FLOATS or \
                not is_last_dim(dim, tensor(n).dim()):
            continue
        out, nodes = n, {n}
        cast = only_user(n)
        if cast_source(cast) is n and dtype(cast) in FLOATS:
            out, nodes = cast, {n, cast}
        kwargs = {"out_dtype": dtype(out)} if dtype(out) != dtype(x) else {}
        levers = FUSED if len(nodes) > 1 else ("library_kernel",)
        fn = SOFTMAX if kind == "softmax" else LOG_SOFTMAX

        def build(g, m, x=x, kwargs=kwargs, fn=fn):
            return [call(g, fn, (m(x),), kwargs, f"row {fn.name}, fp32 math", "probs")]

        found.append(Match(fn.name, nodes, [out], build,
                           f"{kind} over the last dim" + (" and its cast" if len(nodes) > 1
                                                          else "") + f" → {fn.name}",
                           levers, set(), (fn,)))
    return found


def find_bias_act(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        act = _activation(n)
        x = arg(n, 0)
        if act is None or tensor(x) is None or dtype(x) not in FLOATS or \
                dtype(n) != dtype(x) or (n.op != "call_module" and len(n.args) > 1):
            continue
        if n.op == "call_function" and n.target is F.silu and arg(n, 1, "inplace"):
            continue
        nodes, bias, src, linear_w = {n}, None, x, None
        last = shape(x)[-1]
        if op(x) == "add" and len(x.users) == 1:
            for t, b in (operands(x), operands(x)[::-1]):
                if isinstance(b, fx.Node) and b.op == "get_attr" and shape(b) == (last,) and \
                        dtype(b) == dtype(t) == dtype(x) and shape(t) == shape(x):
                    nodes, bias, src = {n, x}, b, t
                    break
        elif op(x) == "linear" and len(x.users) == 1:
            if x.op == "call_module" and x.meta["module"].bias is not None:
                t = str(x.target)
                nodes, src = {n, x}, arg(x, 0)
                linear_w, bias = AttrRef(f"{t}.weight", None), AttrRef(f"{t}.bias", None)
            elif x.op == "call_function" and arg(x, 2, "bias") is not None:
                nodes, src = {n, x}, arg(x, 0)
                linear_w, bias = arg(x, 1, "weight"), arg(x, 2, "bias")

        def build(g, m, src=src, bias=bias, act=act, linear_w=linear_w):
            s = m(src)
            if linear_w is not None:
                s = call(g, F.linear, (s, m(linear_w)), {},
                         "the GEMM without its bias: the epilogue below adds it", "gemm")
            return [call(g, BIAS_ACT, (s, m(bias), act), {},
                         f"bias + {act} in one pass" if bias is not None else act,
                         "activated")]

        fused = bias is not None
        what = ("biased linear + " if linear_w is not None else "bias + " if fused else "") + act
        found.append(Match("bias_act", nodes, [n], build, f"{what} → bias_act",
                           FUSED if fused else ("library_kernel",), set(), (BIAS_ACT,)))
    return found


GLU_PATTERN = Pattern("glu", find_glu, "SwiGLU and GeGLU (tanh) gated units")
SOFTMAX_PATTERN = Pattern("softmax", find_softmax,
                          "softmax over the last dim (and its cast)")
BIAS_ACT_PATTERN = Pattern("bias_act", find_bias_act,
                           "bias + GELU/SiLU, or the activation alone")
