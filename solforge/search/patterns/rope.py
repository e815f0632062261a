"""``rope``: rotate-half rotary embedding, q and k in one launch when they share tables."""

from __future__ import annotations

import operator
from typing import Any

import torch.fx as fx

from solforge.search.match import Match, Pattern, call, item
from solforge.search.nodes import (
    arg,
    dtype,
    is_last_dim,
    number,
    op,
    operands,
    other_operand,
    shape,
    tensor,
    val,
)
from solforge.search.patterns.common import (
    FLOATS,
    FUSED,
    ROTARY,
    graph_nodes,
)
from solforge.search.trace import TracedReference


def _half_slice(n: Any, x: Any, first: bool, half: int) -> bool:
    if op(n) != "getitem" or arg(n, 0) is not x:
        return False
    idx = arg(n, 1)
    if not (isinstance(idx, tuple) and len(idx) == 2 and idx[0] is Ellipsis
            and isinstance(idx[1], slice) and idx[1].step is None):
        return False
    sl = idx[1]
    bound = sl.stop if first else sl.start
    other = sl.start if first else sl.stop
    return other is None and val(bound) == half


def _rotate_half(rot: Any) -> tuple[Any, set[fx.Node]] | None:
    if op(rot) != "cat" or len(rot.users) != 1 or tensor(rot) is None:
        return None
    parts = arg(rot, 0, "tensors")
    if not (isinstance(parts, (list, tuple)) and len(parts) == 2) or \
            not is_last_dim(arg(rot, 1, "dim", 0), tensor(rot).dim()):
        return None
    neg, x1 = parts
    if op(neg) != "neg" or len(neg.users) != 1:
        return None
    x2 = arg(neg, 0)
    x = arg(x1, 0) if isinstance(x1, fx.Node) else None
    half = shape(rot)[-1] // 2
    if x is None or shape(rot)[-1] % 2 or not _half_slice(x1, x, True, half) or \
            not _half_slice(x2, x, False, half):
        return None
    return x, {rot, neg, x1, x2}


def find_rope(tr: TracedReference) -> list[Match]:
    singles = []
    for out in graph_nodes(tr):
        if op(out) != "add":
            continue
        for a, b in (operands(out), operands(out)[::-1]):
            if op(a) != "mul" or op(b) != "mul" or len(a.users) != 1 or len(b.users) != 1:
                continue
            for rot, sin in (operands(b), operands(b)[::-1]):
                rh = _rotate_half(rot)
                if rh is None:
                    continue
                x, rnodes = rh
                cos = other_operand(a, x)
                xs, cs = shape(x), shape(cos)
                if cos is None or xs is None or cs is None or len(xs) != 4 or \
                        shape(sin) != cs or len(cs) != 4 or cs[1] != 1 or cs[2:] != xs[2:] \
                        or cs[0] not in (1, xs[0]):
                    continue
                if not dtype(x) == dtype(cos) == dtype(sin) == dtype(out) or \
                        dtype(x) not in FLOATS:
                    continue
                singles.append((out, x, cos, sin, {out, a, b} | rnodes))
                break
            else:
                continue
            break
    found, used = [], set()
    for i, (out, x, cos, sin, nodes) in enumerate(singles):
        if i in used:
            continue
        pair = next((j for j in range(i + 1, len(singles)) if j not in used
                     and singles[j][2] is cos and singles[j][3] is sin
                     and shape(singles[j][1])[0] == shape(x)[0]), None)
        used.add(i)
        if pair is not None:
            used.add(pair)
        found.append(_rope_match(singles[i], singles[pair] if pair is not None else None))
    return found


def _table(g: fx.Graph, m: Any, t: fx.Node) -> Any:
    """cos/sin as the library wants them: [B, S, D], without the head axis."""
    if op(t) == "unsqueeze" and number(arg(t, 1, "dim")) == 1:
        return m(arg(t, 0))
    return g.call_function(operator.getitem, (m(t), (slice(None), 0)))


def _rope_match(q_match, k_match) -> Match:
    out_q, q, cos, sin, nodes = q_match
    outs = [out_q]
    if k_match is not None:
        out_k, _, _, _, k_nodes = k_match
        nodes = nodes | k_nodes
        outs.append(out_k)

    def build(g, m):
        c, s = _table(g, m, cos), _table(g, m, sin)
        if k_match is None:
            # the library rotates q and k in one launch; a lone tensor goes with no k heads
            kk = g.call_function(operator.getitem, (m(q), (slice(None), slice(None, 0))))
            r = call(g, ROTARY, (m(q), kk, c, s), {}, "rotate-half RoPE in one pass",
                     "rotated")
            return [item(g, r, 0, "rotated_x")]
        r = call(g, ROTARY, (m(q), m(k_match[1]), c, s), {},
                 "rotate-half RoPE of q and k in one launch", "rotated")
        return [item(g, r, 0, "rotated_q"), item(g, r, 1, "rotated_k")]

    what = "q and k" if k_match is not None else "one tensor"
    return Match("rope", nodes, outs, build,
                 f"rotate-half rotary embedding of {what} → rotary_embedding", FUSED,
                 set(), (ROTARY,))


ROPE_PATTERN = Pattern("rope", find_rope, "rotate-half rotary embedding")
