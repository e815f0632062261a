"""``mha_no_weights``: an ``nn.MultiheadAttention`` call whose attention weights nobody
reads → the same call with ``need_weights=False``.

With ``need_weights=True`` (its default) ``nn.MultiheadAttention`` materialises the
``(L, S)`` weights of every head (``bmm``, ``softmax``, ``bmm``, and the mean over heads it
returns); with ``False`` it calls ``F.scaled_dot_product_attention`` (a fused kernel, no
weight matrix). Its eval-mode fast path (no autograd, self-attention, ...) is PyTorch's
native kernel either way, told not to return the weights. The output is the same up to
fp32 rounding. Every other argument (``key_padding_mask``, ``attn_mask``,
``average_attn_weights``; the module's ``batch_first``, ``add_zero_attn``, ...) is kept
as the reference passed it. Where a mask is passed, a query row some head lets attend
to no key is set to NaN (``runtime.nan_where_no_key``), as the weights path computes
it (a softmax of only ``-inf``) and the SDPA path does not (it gives 0 there).

The weights are unused when every user of the call is ``[0]``, or a ``[1]`` nothing
reads (``out, _ = self.attn(x, x, x)``).

Not covered: ``is_causal=True`` (with ``need_weights=False`` PyTorch then drops
``attn_mask`` for SDPA's causal kernel, exact only when the mask is causal: not
matched), dropout with ``p > 0`` while training (random weights: not matched),
``nn.MultiheadAttention`` subclasses, a call whose output tuple is used whole.
"""

from __future__ import annotations

import operator
from typing import Any

import torch.fx as fx

from solforge.search.match import LibraryFunction, Match, Pattern, call
from solforge.search.nodes import arg, op
from solforge.search.patterns.common import first_only, graph_nodes
from solforge.search.trace import TracedReference

NAN_WHERE_NO_KEY = LibraryFunction("nan_where_no_key", module="solforge.search.runtime")
_MASKS = ((3, "key_padding_mask"), (5, "attn_mask"))


def find_mha(tr: TracedReference) -> list[Match]:
    found = []
    for n in graph_nodes(tr):
        if op(n) != "multihead_attention":
            continue
        mod = n.meta["module"]
        if arg(n, 4, "need_weights", True) is not True or \
                arg(n, 7, "is_causal", False) is not False or \
                (mod.dropout > 0 and mod.training):
            continue
        unused = first_only(n)
        if unused is None:
            continue
        first, seconds = unused
        masks = [arg(n, i, name) for i, name in _MASKS]
        masked = any(isinstance(x, fx.Node) for x in masks)
        if any(x is not None and not isinstance(x, fx.Node) for x in masks):
            continue  # a mask as a constant: none of ours

        def build(g, m, n=n, masks=masks, masked=masked):
            args = list(m(n.args))
            kwargs = dict(m(n.kwargs))
            if len(args) > 4:
                args[4] = False
            else:
                kwargs["need_weights"] = False
            new = g.create_node("call_module", n.target, tuple(args), kwargs)
            new.meta["solforge_comment"] = ("the attention weights are unused: "
                                            "need_weights=False runs the fused SDPA path")
            out = g.create_node("call_function", operator.getitem, (new, 0))
            if not masked:
                return [out]
            mha = g.create_node("get_attr", str(n.target))
            return [call(g, NAN_WHERE_NO_KEY, (mha, out, *m(masks)), {},
                         "a query no key may attend to: NaN, as with need_weights=True")]

        what = "; rows without a key set to NaN as the weights path" if masked else ""
        found.append(Match("mha_no_weights", {n, first} | seconds, [first], build,
                           f"nn.MultiheadAttention self.{n.target} whose attention weights "
                           f"are unused → need_weights=False (fused SDPA{what})",
                           ("sdpa",), set(), (NAN_WHERE_NO_KEY,) if masked else ()))
    return found


MHA_PATTERN = Pattern("mha_no_weights", find_mha,
                      "nn.MultiheadAttention with unused weights → need_weights=False")
