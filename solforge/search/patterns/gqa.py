"""``gqa``: keys and values repeated per query group (``repeat_kv``) before an SDPA call →
the same call reading the grouped keys and values itself (``enable_gqa=True``).

Llama, Mistral and Qwen references expand each key/value head ``n_rep`` times into a new
tensor (``x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)``) so that plain
SDPA sees as many key heads as query heads: a copy of the whole KV cache, per call, that a
fused kernel with grouped-query support does not need. The rewrite drops the copy and
passes the ``(b, h, s, d)`` keys and values with ``enable_gqa=True`` (query head ``i``
reads key head ``i // n``, the same pairing ``repeat_kv`` makes); every other argument
(mask, causal flag, scale) is kept as the reference wrote it.

Not covered: a repeat spelled another way (``repeat_interleave``, ``expand`` without the
new dim at 2), a repeat whose copy is used elsewhere too, hand-written attention over
repeated keys (``sdpa`` first; a second pass is not run). Which backend SDPA picks with
``enable_gqa`` and a mask is PyTorch's choice; the evaluator's timing says whether the
rewrite wins.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx
import torch.nn.functional as F

from solforge.search.match import Match, Pattern, call
from solforge.search.nodes import arg, number, op, tensor
from solforge.search.patterns.common import graph_nodes
from solforge.search.trace import TracedReference

_ALL = slice(None)


def _new_dim_at_2(g: Any) -> fx.Node | None:
    """``x`` when ``g`` is ``x[:, :, None]`` or ``x.unsqueeze(2)`` of a 4-D ``x``."""
    if op(g) == "getitem" and len(g.args) == 2 and \
            g.args[1] == (_ALL, _ALL, None, _ALL, _ALL):
        x = g.args[0]
    elif op(g) == "unsqueeze" and number(arg(g, 1, "dim")) in (2.0, -3.0):
        x = arg(g, 0)
    else:
        return None
    t = tensor(x)
    return x if t is not None and t.dim() == 4 else None


def repeated_kv(node: Any) -> tuple[fx.Node, set[fx.Node], int] | None:
    """(x, the nodes of the repeat, n) when ``node`` is ``repeat_kv(x, n)``, n > 1."""
    if op(node) != "reshape" or len(node.users) != 1:
        return None
    e = arg(node, 0)
    if op(e) != "expand" or len(e.users) != 1:
        return None
    g = arg(e, 0)
    if not isinstance(g, fx.Node) or len(g.users) != 1:
        return None
    x = _new_dim_at_2(g)
    tx, te, tr = tensor(x), tensor(e), tensor(node)
    if x is None or te is None or tr is None or te.dim() != 5:
        return None
    b, h, s, d = tx.shape
    n = te.shape[2]
    if tuple(te.shape) != (b, h, n, s, d) or tuple(tr.shape) != (b, h * n, s, d) or n < 2:
        return None
    return x, {node, e, g}, n


def find_gqa(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        if op(n) != "sdpa" or arg(n, 7, "enable_gqa", False):
            continue
        q, k, v = arg(n, 0, "query"), arg(n, 1, "key"), arg(n, 2, "value")
        rk, rv = repeated_kv(k), repeated_kv(v)
        tq = tensor(q)
        if rk is None or rv is None or rk[2] != rv[2] or tq is None or tq.dim() != 4 or \
                tq.shape[1] != tensor(k).shape[1]:
            continue
        (xk, nk, _), (xv, nv, _) = rk, rv
        rest = n.args[3:]
        kwargs = {key: a for key, a in n.kwargs.items()
                  if key not in ("query", "key", "value")}

        def build(g, m, q=q, xk=xk, xv=xv, rest=rest, kwargs=kwargs):
            return [call(g, F.scaled_dot_product_attention, (m(q), m(xk), m(xv), *m(rest)),
                         {**m(kwargs), "enable_gqa": True},
                         "grouped-query attention: SDPA reads the shared key/value heads "
                         "(no repeat_kv copy)", "attn")]

        found.append(Match("gqa", {n} | nk | nv, [n], build,
                           "repeat_kv (key/value heads copied once per query head of "
                           "their group) feeding SDPA → F.scaled_dot_product_attention("
                           "..., enable_gqa=True)",
                           ("sdpa", "fusion"), set(), (F.scaled_dot_product_attention,)))
    return found


GQA_PATTERN = Pattern("gqa", find_gqa, "repeat_kv feeding SDPA → SDPA with enable_gqa")
