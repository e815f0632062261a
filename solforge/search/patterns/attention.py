"""``sdpa``: attention spelled as matmul, softmax, matmul → one fused SDPA call.

``q @ k^T`` [``* scale`` or ``/ c``] [a mask] ``softmax(-1)`` [cast] [dropout] ``@ v``,
where the mask is one of:

- ``+ torch.full((L, L), -big).triu(1)``: recognised by its construction, passed as
  ``is_causal=True``;
- ``.masked_fill(M, fill)`` with a boolean ``M`` and ``fill`` ``-inf`` or at most
  ``-1e4``: ``M`` is ``X == c`` (``bias[:, :, :T, :T] == 0``, minGPT's and nanoGPT's
  causal buffer), ``~X`` / ``X.logical_not()`` of a boolean ``X``, or any other boolean
  tensor. The call becomes ``runtime.masked_sdpa(q, k, v, X, c, fill=...)``: SDPA with
  ``attn_mask = (X != c)`` (True: the key takes part); when ``X`` is (a slice of) a module
  tensor, SDPA's causal kernel instead wherever its values are ``tril(ones(L, S))``,
  checked in the generated file on the values once per buffer version, never assumed
  from the attribute's name. Rows with no key left get the reference's value there (NaN
  for ``-inf``, the mean of ``v`` for a finite fill: see ``masked_sdpa``).

A dropout between the softmax and ``@ v`` (``nn.Dropout``, ``F.dropout``) is matched
where it is the identity as traced (``p == 0``, or the module in eval mode, or
``training=False``); it becomes SDPA's ``dropout_p``, which is the dropout's ``p`` while
it trains and 0 otherwise, so the candidate keeps the reference's meaning if the mode or
``p`` changes later (random masks are not reproduced then, by either side).

A finite fill is exact where a row keeps a key whose score is above ``fill + 104`` (the
masked keys' weights, ``exp(fill - max)``, underflow to 0 in fp32): the fill at most
``-1e4`` makes that every score of a real model. The scale may be a number, an attribute
or a number computed in ``forward`` (``1.0 / math.sqrt(k.size(-1))``), kept as written.

q, k, v and the output have one floating dtype at the call: q and k may be cast to fp32
for the scores (the call takes their sources, fused kernels keep fp32 scores); where v is
cast as well and the output is the casts' dtype (BLOOM's ``q.float()``, ``k.float()``,
``v.float()``, then ``.to(q.dtype)``), the call takes the casts, the whole chain in fp32.

The pieces of the chain (:func:`attention_head`, :func:`qk_scores`,
:func:`boolean_mask`) are shared with ``attention_bias.py`` (``sdpa_bias``), which takes
the scores plus an additive float bias.

Not covered: a mask applied before the scale (``(s.masked_fill(m, -inf)) * c``), fills
above ``-1e4``, ``torch.where(mask, s, -inf)`` (GPT-2's old spelling), masks added as
float tensors other than the ``triu`` construction (``sdpa_bias``'s), dropout with
``p > 0`` while training (its random weights cannot be reproduced), in-place
``masked_fill_``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from solforge.search.match import LibraryFunction, Match, Pattern, call
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
    val,
)
from solforge.search.patterns.common import (
    FLOATS,
    graph_nodes,
)
from solforge.search.trace import AttrRef, TracedReference

MASKED_SDPA = LibraryFunction("masked_sdpa", module="solforge.search.runtime")
# a finite masked_fill value at or below this is a mask (exp(fill - max) is 0 in fp32)
FILL_AT_MOST = -1e4


def _causal_mask(m: Any, lq: int, lk: int) -> set[fx.Node] | None:
    """The nodes of ``torch.full((L, L), -big).triu(1)``, or None."""
    if op(m) != "triu" or number(arg(m, 1, "diagonal", 0)) != 1:
        return None
    full = arg(m, 0)
    if op(full) != "full" or lq != lk:
        return None
    fill = number(arg(full, 1, "fill_value"))
    if fill is None or fill > -1e30 or shape(full) != (lq, lk):
        return None
    return {m, full}


@dataclass
class BooleanMask:
    """``masked_fill(source == masked, fill)``, as ``runtime.masked_sdpa`` takes it."""

    source: fx.Node
    masked: Any                  # the constant marking a masked entry of ``source``
    fill: Any                    # -inf or a number at most FILL_AT_MOST (or an attribute)
    buffer: bool                 # ``source`` is a module tensor or a slice of one
    nodes: set[fx.Node] = field(default_factory=set)  # the comparison/negation, if any


def _is_module_tensor(n: Any) -> bool:
    """``self.<buffer>`` or ``self.<buffer>[slices]``."""
    if op(n) == "getitem":
        idx = n.args[1]
        parts = idx if isinstance(idx, tuple) else (idx,)
        if not all(isinstance(p, slice) or p is None or p is Ellipsis for p in parts):
            return False
        n = n.args[0]
    return isinstance(n, fx.Node) and n.op == "get_attr" and tensor(n) is not None


def _describe(n: fx.Node) -> str:
    """``self.bias[...]`` for a module tensor (or a slice of one), else the node's name."""
    if n.op == "get_attr":
        return f"self.{n.target}"
    if op(n) == "getitem" and n.args[0].op == "get_attr":
        return f"self.{n.args[0].target}[...]"
    return n.name


def mask_text(mask: BooleanMask) -> str:
    return f"masked_fill({_describe(mask.source)} == {mask.masked!r}, {mask.fill!r})"


def _constant(c: Any) -> bool:
    return not isinstance(c, fx.Node) and (isinstance(c, bool) or number(c) is not None)


def boolean_mask(mf: fx.Node) -> BooleanMask | None:
    """The mask of ``scores.masked_fill(M, fill)``, or None where it is no exact mask."""
    if len(mf.users) != 1 or shape(mf) != shape(arg(mf, 0)):
        return None
    m, value = arg(mf, 1, "mask"), arg(mf, 2, "value")
    fill = number(value)
    if dtype(m) != torch.bool or fill is None or \
            not (fill == -math.inf or fill <= FILL_AT_MOST):
        return None
    source, masked, nodes = m, True, set()
    if op(m) == "eq":
        a, b = operands(m)
        for x, c in ((a, b), (b, a)):
            if tensor(x) is not None and _constant(c):
                source, masked, nodes = x, c, {m}
                break
    elif op(m) == "not" and dtype(arg(m, 0)) == torch.bool:
        source, masked, nodes = arg(m, 0), False, {m}
    return BooleanMask(source, masked, value, _is_module_tensor(source), nodes)


def _identity_dropout(d: fx.Node) -> tuple[str, Any] | None:
    """How SDPA's ``dropout_p`` reads a dropout that is the identity as traced:
    ``("module", target)`` (its ``p`` while it trains) or ``("p", p)`` (``F.dropout``
    with ``training=True``, ``p`` 0); ``("none", None)`` for ``training=False``. None:
    a dropout that drops (or one not read here)."""
    if len(d.users) != 1:
        return None
    if d.op == "call_module":
        mod = d.meta["module"]
        return ("module", str(d.target)) if mod.p == 0 or not mod.training else None
    p, training = arg(d, 1, "p", 0.5), arg(d, 2, "training", True)
    if arg(d, 3, "inplace", False) is not False or not isinstance(training, bool):
        return None
    if not training:
        return ("none", None)
    return ("p", p) if number(p) == 0 else None


def _dropout_p(g: fx.Graph, dropout: tuple[str, Any] | None) -> Any:
    if dropout is None or dropout[0] == "none":
        return None
    if dropout[0] == "p":
        return dropout[1]
    p = g.create_node("get_attr", f"{dropout[1]}.p")
    training = g.create_node("get_attr", f"{dropout[1]}.training")
    node = g.create_node("call_function", operator.mul, (p, training))
    node.meta["solforge_comment"] = "the reference's dropout p while it trains, else 0"
    return node


def _scalar(a: Any) -> bool:
    """A number: a constant, an attribute, or a Python number computed in ``forward``."""
    v = val(a)
    return _constant(a) and not isinstance(a, bool) or \
        isinstance(a, fx.Node) and isinstance(v, (int, float)) and not isinstance(v, bool)


def _scaled(s: fx.Node) -> tuple[fx.Node, Any] | None:
    """``(x, c)`` of ``x * c``, ``c * x`` or ``x / c`` with a tensor ``x`` and a number
    ``c``."""
    a, b = operands(s)
    if tensor(a) is not None and _scalar(b):
        return a, b
    if op(s) == "mul" and tensor(b) is not None and _scalar(a):
        return b, a
    return None


def _scale_arg(g: fx.Graph, m: Any, kind: str, c: Any) -> Any:
    if kind == "none":
        return 1.0
    if kind == "mul":
        return m(c)
    if not isinstance(c, (fx.Node, AttrRef)):
        return 1.0 / number(c)
    return g.create_node("call_function", operator.truediv, (1.0, m(c)))


@dataclass
class Head:
    """``softmax(scores, -1)`` [cast] [identity dropout] ``@ v``: the chain's last steps."""

    scores: Any                  # the softmax's input
    v: Any
    nodes: set[fx.Node]
    dropout: tuple[str, Any] | None


def attention_head(out: Any) -> Head | None:
    """The softmax, cast and dropout feeding ``out = matmul(p, v)``, or None."""
    if op(out) != "matmul":
        return None
    p, v = operands(out)
    nodes, dropout = {out}, None
    if op(p) == "dropout":
        dropout = _identity_dropout(p)
        if dropout is None:
            return None
        nodes.add(p)
        p = arg(p, 0)
    p0 = cast_source(p)
    if p0 is not None and len(p.users) == 1:
        nodes.add(p)
        p = p0
    if op(p) != "softmax" or len(p.users) != 1 or tensor(p) is None or \
            not is_last_dim(arg(p, 1, "dim"), tensor(p).dim()):
        return None
    nodes.add(p)
    return Head(arg(p, 0), v, nodes, dropout)


@dataclass
class Scores:
    """``q @ k^T`` [``* c`` or ``/ c``], read as SDPA takes it."""

    q: fx.Node                   # the operands of the SDPA call (a cast's source, or the
    k: fx.Node                   # cast itself where only that has the call's dtype)
    scale: tuple[str, Any]       # ("none" | "mul" | "div", c)
    nodes: set[fx.Node]
    optional: set[fx.Node]       # the casts of q and k left out of the call


def qk_scores(s: Any, out: fx.Node, v: Any) -> Scores | None:
    """The scores ``s`` as ``q @ k.transpose(-2, -1)`` [scaled] where SDPA computes the
    same: q, k, v and ``out`` of one floating dtype at the call (q, k may be cast to fp32
    for the scores; where v is cast as well, the call takes the casts), same rank >= 3."""
    nodes: set[fx.Node] = set()
    scale_kind, c = "none", None
    if op(s) in ("mul", "div") and len(s.users) == 1:
        split = _scaled(s)
        if split is None:
            return None
        nodes.add(s)
        (s, c), scale_kind = split, op(s)
    if op(s) != "matmul" or len(s.users) != 1:
        return None
    nodes.add(s)
    qf, kt = operands(s)
    if op(kt) != "transpose" or len(kt.users) != 1 or tensor(kt) is None:
        return None
    rank = tensor(kt).dim()
    dims = {int(number(arg(kt, 1, "dim0")) or 0) % rank,
            int(number(arg(kt, 2, "dim1")) or 0) % rank}
    if dims != {rank - 2, rank - 1}:
        return None
    nodes.add(kt)
    kf = arg(kt, 0)
    dt = dtype(out)
    if dt not in FLOATS or dtype(kf) not in (dt, torch.float32) or dtype(qf) != dtype(kf):
        return None
    # the sources of q's and k's casts, else the casts themselves (Bloom's q.float() beside
    # v.float(): the whole chain in fp32)
    for q, k in ((cast_source(qf) or qf, cast_source(kf) or kf), (qf, kf)):
        if all(dtype(t) == dt for t in (q, k, v)):
            break
    else:
        return None
    if tensor(q).dim() < 3 or not tensor(q).dim() == tensor(k).dim() == tensor(v).dim():
        return None
    optional = {cast for cast, src in ((qf, q), (kf, k)) if cast is not src}
    return Scores(q, k, (scale_kind, c), nodes, optional)


def sdpa_kwargs(g: fx.Graph, m: Any, sc: Scores, head: Head) -> dict[str, Any]:
    """SDPA's ``scale`` and, for a dropout, ``dropout_p``."""
    kwargs: dict[str, Any] = {"scale": _scale_arg(g, m, *sc.scale)}
    dropout_p = _dropout_p(g, head.dropout)
    if dropout_p is not None:
        kwargs["dropout_p"] = dropout_p
    return kwargs


def scale_text(sc: Scores) -> str:
    kind, c = sc.scale
    c_text = "a number computed in forward" if isinstance(c, fx.Node) else repr(c)
    return {"none": "1", "mul": c_text, "div": f"1 / {c_text}"}[kind]


def find_sdpa(tr: TracedReference) -> list[Match]:
    found = []
    for out in graph_nodes(tr):
        head = attention_head(out)
        if head is None:
            continue
        nodes, optional = set(head.nodes), set()
        s = head.scores
        causal, mask = False, None
        if op(s) == "masked_fill":
            mask = boolean_mask(s)
            if mask is None:
                continue
            nodes.add(s)
            optional |= mask.nodes
            s = arg(s, 0)
        elif op(s) == "add" and len(s.users) == 1:
            a, b = operands(s)
            st = tensor(s)
            for scores, mnodes in ((a, b), (b, a)):
                mnodes = _causal_mask(mnodes, st.shape[-2], st.shape[-1]) \
                    if st is not None else None
                if mnodes is not None and tensor(scores) is not None and \
                        shape(scores) == shape(s):
                    nodes.add(s)
                    optional |= mnodes
                    s, causal = scores, True
                    break
            if not causal:
                continue  # an additive float mask: ``attention_bias.py``'s
        sc = qk_scores(s, out, head.v)
        if sc is None:
            continue
        nodes |= sc.nodes
        optional |= sc.optional

        def build(g, m, sc=sc, head=head, causal=causal, mask=mask):
            kwargs = sdpa_kwargs(g, m, sc, head)
            q, k, v = m(sc.q), m(sc.k), m(head.v)
            if mask is None:
                if causal:
                    kwargs = {"is_causal": True, **kwargs}
                return [call(g, F.scaled_dot_product_attention, (q, k, v), kwargs,
                             "matmul-softmax-matmul attention as one fused SDPA call",
                             "attn")]
            kwargs = {"fill": mask.fill, **kwargs}
            if mask.buffer:
                kwargs["buffer"] = True
            why = ("masked attention in one SDPA call: is_causal where the buffer's mask "
                   "is tril(ones), checked once per buffer version" if mask.buffer else
                   "masked attention in one SDPA call, with the boolean mask it keeps")
            return [call(g, MASKED_SDPA, (q, k, v, m(mask.source), mask.masked),
                         kwargs, why, "attn")]

        what = "causal " if causal else "masked " if mask is not None else ""
        extra = ""
        if mask is not None:
            extra = f"; {mask_text(mask)}" + (", is_causal where its values are tril(ones)"
                                               if mask.buffer else "")
        if head.dropout is not None:
            extra += "; dropout (identity as traced) as dropout_p"
        target = "runtime.masked_sdpa" if mask is not None else "F.scaled_dot_product_attention"
        found.append(Match("sdpa", nodes, [out], build,
                           f"{what}attention spelled as matmul, softmax, matmul "
                           f"(scale {scale_text(sc)}{extra}) → {target}",
                           ("sdpa", "fusion"), optional,
                           (MASKED_SDPA,) if mask is not None
                           else (F.scaled_dot_product_attention,)))
    return found


SDPA_PATTERN = Pattern("sdpa", find_sdpa, "attention as matmul-softmax-matmul → fused SDPA")
