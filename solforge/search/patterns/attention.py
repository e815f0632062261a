"""``sdpa``: attention spelled as matmul, softmax, matmul → one fused SDPA call."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from solforge.search.match import (
    Match,
    Pattern,
    arg,
    call,
    cast_source,
    dtype,
    is_last_dim,
    number,
    op,
    operands,
    shape,
    split_constant,
    tensor,
)
from solforge.search.patterns.common import (
    FLOATS,
    graph_nodes,
)
from solforge.search.trace import AttrRef, TracedReference


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


def find_sdpa(tr: TracedReference) -> list[Match]:
    found = []
    for out in graph_nodes(tr):
        if op(out) != "matmul":
            continue
        p, v = operands(out)
        nodes, optional = {out}, set()
        p0 = cast_source(p)
        if p0 is not None and len(p.users) == 1:
            nodes.add(p)
            p = p0
        if op(p) != "softmax" or len(p.users) != 1 or tensor(p) is None or \
                not is_last_dim(arg(p, 1, "dim"), tensor(p).dim()):
            continue
        nodes.add(p)
        s = arg(p, 0)
        causal = False
        if op(s) == "add" and len(s.users) == 1:
            a, b = operands(s)
            sc = tensor(s)
            for scores, mask in ((a, b), (b, a)):
                mnodes = _causal_mask(mask, sc.shape[-2], sc.shape[-1]) \
                    if sc is not None else None
                if mnodes is not None and tensor(scores) is not None and \
                        shape(scores) == shape(s):
                    nodes.add(s)
                    optional |= mnodes
                    s, causal = scores, True
                    break
            if not causal:
                continue
        scale: Any = 1.0
        if op(s) in ("mul", "div") and len(s.users) == 1:
            s0, c = split_constant(s)
            if s0 is None or (op(s) == "div" and (isinstance(c, AttrRef) or operands(s)[1] is s0)):
                continue
            scale = c if op(s) == "mul" else 1.0 / number(c)
            nodes.add(s)
            s = s0
        if op(s) != "matmul" or len(s.users) != 1:
            continue
        nodes.add(s)
        qf, kt = operands(s)
        if op(kt) != "transpose" or len(kt.users) != 1 or tensor(kt) is None:
            continue
        rank = tensor(kt).dim()
        dims = {int(number(arg(kt, 1, "dim0")) or 0) % rank,
                int(number(arg(kt, 2, "dim1")) or 0) % rank}
        if dims != {rank - 2, rank - 1}:
            continue
        nodes.add(kt)
        kf = arg(kt, 0)
        q, k = cast_source(qf) or qf, cast_source(kf) or kf
        for cast, src in ((qf, q), (kf, k)):
            if cast is not src:
                optional.add(cast)
        dt = dtype(out)
        if not all(dtype(t) == dt for t in (q, k, v)) or dt not in FLOATS or \
                tensor(q).dim() < 3 or not (tensor(q).dim() == tensor(k).dim()
                                            == tensor(v).dim()):
            continue
        if dtype(kf) not in (dt, torch.float32) or dtype(qf) != dtype(kf):
            continue

        def build(g, m, q=q, k=k, v=v, causal=causal, scale=scale):
            kwargs = {"is_causal": True} if causal else {}
            kwargs["scale"] = scale
            return [call(g, F.scaled_dot_product_attention, (m(q), m(k), m(v)), kwargs,
                         "matmul-softmax-matmul attention as one fused SDPA call", "attn")]

        what = "causal " if causal else ""
        found.append(Match("sdpa", nodes, [out], build,
                           f"{what}attention spelled as matmul, softmax, matmul "
                           f"(scale {scale!r}) → F.scaled_dot_product_attention",
                           ("sdpa", "fusion"), optional, (F.scaled_dot_product_attention,)))
    return found


SDPA_PATTERN = Pattern("sdpa", find_sdpa, "attention as matmul-softmax-matmul → fused SDPA")
