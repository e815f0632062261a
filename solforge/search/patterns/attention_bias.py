"""``sdpa_bias``: attention whose scores get an additive float bias → one fused SDPA call.

``q @ k^T`` [``* c`` or ``/ c``] ``+ bias`` (or ``bias + ...``) [``.masked_fill(M, fill)``]
``softmax(-1)`` [cast] [dropout] ``@ v`` → ``runtime.biased_sdpa``: SDPA with a float
``attn_mask``, which it adds to the scaled scores (``softmax(q @ k^T * scale + attn_mask)
@ v``), the reference's own order: the scale, then the bias. The bias is whatever the
reference computes (BLOOM's ALiBi ``slopes[:, None, None] * rel``, Swin's
``bias_table[rel_index.view(-1)].view(...).permute(...)``, an input such as HF's additive
padding mask); its nodes stay in the rewritten graph and feed the call, only the matmul,
add, softmax and matmul are replaced. The scale, the boolean ``masked_fill`` after the add
and the dropout are read as the ``sdpa`` pattern reads them (``attention.py``); the mask is
folded into the bias as ``-inf`` where it masks (``torch.where`` in ``biased_sdpa``).

Exact where (checked on the example values of the nodes):

- the bias has the dtype q, k and v have at the call (the output's: with q, k cast to fp32
  for the scores, their sources' dtype; with v cast too, the casts', as BLOOM's fp32 chain
  on bf16 inputs), or it is a cast of such a tensor to a wider float type (bf16 or fp16 to
  fp32 keeps every value); and the add leaves the scores' dtype as it is. SDPA adds a float
  mask of the query's dtype: an fp32 bias beside bf16 q, k, v would be rounded to bf16 for
  the call where the reference adds it unrounded (bf16 scores plus an fp32 bias promote to
  fp32), so that is not matched, nor is a bias of an integer or boolean dtype;
- the bias broadcasts to the scores' shape ``[..., L, S]`` without growing it, with rank 2
  or more (PyTorch 2.13's CPU SDPA refuses a 1-D mask beside 4-D q), the ranks of q, k, v
  as the ``sdpa`` pattern takes them (3-D ``[B*H, L, E]`` or more);
- the bias is added after the scale: ``(q @ k^T + bias) * c`` scales the bias too, which
  SDPA does not, and is left alone.

Rows: a row whose every score is ``-inf`` (a bias of ``-inf`` there, or with the boolean
mask) is NaN in the reference (softmax of only ``-inf``) and 0 from SDPA's CPU kernels
(PyTorch 2.13): ``biased_sdpa`` puts NaN there. A row the boolean mask covers whole with a
finite fill gets the mean of ``v`` (every score is the fill). A finite fill is exact, as in
``sdpa``, where a row keeps a key whose biased score is above ``fill + 104``. Scores in
bf16 or fp16 are rounded by the reference after the matmul and after the add; SDPA keeps
them in fp32: the approximation the ``sdpa`` pattern makes for every 16-bit attention.

Not covered: a bias added before the scale; a mask applied before the bias
(``s.masked_fill(M, -inf) + bias``); a bias added to a view of the scores (Swin's
shifted-window mask on ``attn.view(B / nW, nW, H, N, N)``, SAM's decomposed relative
positions on a 5-D view); several biases added one after another (each add rounds; their
sum first would round differently); a per-head tensor scale (SwinV2's ``logit_scale``); a
cast between the add and the softmax (T5's ``softmax(scores.float())``); ``scores -
bias``, ``torch.add``'s ``alpha``; a bias that would be rounded for the call (above);
``nn.Softmax`` modules and whatever else ``sdpa`` leaves out.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from solforge.search.match import LibraryFunction, Match, Pattern, call
from solforge.search.nodes import arg, cast_source, dtype, op, operands, tensor
from solforge.search.patterns.attention import (
    BooleanMask,
    Head,
    Scores,
    attention_head,
    boolean_mask,
    mask_text,
    qk_scores,
    scale_text,
    sdpa_kwargs,
)
from solforge.search.patterns.common import graph_nodes
from solforge.search.trace import TracedReference

BIASED_SDPA = LibraryFunction("biased_sdpa", module="solforge.search.runtime")
# casts that keep every value: a 16-bit float is an fp32 exactly
_WIDENS = {(torch.bfloat16, torch.float32), (torch.float16, torch.float32)}


def _attn_mask(add: fx.Node, scores: fx.Node, bias: Any, dt: torch.dtype
               ) -> tuple[fx.Node, set[fx.Node]] | None:
    """What SDPA adds for ``add = scores + bias`` (the bias, or the source of its widening
    cast) and the cast left out of the call; None where the call would not add the same
    values (see the module docstring)."""
    b = tensor(bias)
    if b is None or tensor(scores) is None or dtype(add) != dtype(scores) or b.dim() < 2:
        return None
    try:  # SDPA broadcasts the mask to the scores; it never grows them
        if torch.broadcast_shapes(b.shape, tensor(scores).shape) != tensor(scores).shape:
            return None
    except RuntimeError:
        return None
    if b.dtype == dt:
        return bias, set()
    src = cast_source(bias)
    if src is not None and dtype(src) == dt and (dt, b.dtype) in _WIDENS:
        return src, {bias}
    return None


def _biased(add: Any, out: fx.Node, head: Head
            ) -> tuple[Scores, fx.Node, set[fx.Node]] | None:
    """``add`` as ``scores + bias`` (either order) with SDPA's scores and mask."""
    if op(add) != "add" or len(add.users) != 1 or arg(add, 2, "alpha") is not None:
        return None
    a, b = operands(add)
    for scores, bias in ((a, b), (b, a)):
        sc = qk_scores(scores, out, head.v) if isinstance(scores, fx.Node) else None
        if sc is None:
            continue
        found = _attn_mask(add, scores, bias, dtype(out))
        if found is not None:
            return sc, *found
    return None


def find_sdpa_bias(tr: TracedReference) -> list[Match]:
    found = []
    for out in graph_nodes(tr):
        head = attention_head(out)
        if head is None:
            continue
        nodes, optional = set(head.nodes), set()
        s, mask = head.scores, None
        if op(s) == "masked_fill":
            mask = boolean_mask(s)
            if mask is None:
                continue
            nodes.add(s)
            optional |= mask.nodes
            s = arg(s, 0)
        biased = _biased(s, out, head)
        if biased is None:
            continue
        sc, bias, casts = biased
        if bias in sc.nodes:  # ``s + s``: no tensor outside the match to pass
            continue
        nodes |= {s} | sc.nodes
        optional |= sc.optional | casts

        def build(g, m, sc=sc, head=head, bias=bias, mask=mask):
            kwargs = sdpa_kwargs(g, m, sc, head)
            args: tuple[Any, ...] = (m(sc.q), m(sc.k), m(head.v), m(bias))
            if mask is not None:
                args += (m(mask.source), mask.masked)
                kwargs = {"fill": mask.fill, **kwargs}
            return [call(g, BIASED_SDPA, args, kwargs,
                         "attention with an additive bias in one SDPA call (attn_mask)",
                         "attn")]

        what = _description(sc, head, bias, mask)
        found.append(Match("sdpa_bias", nodes, [out], build, what, ("sdpa", "fusion"),
                           optional, (BIASED_SDPA,)))
    return found


def _description(sc: Scores, head: Head, bias: fx.Node, mask: BooleanMask | None) -> str:
    b = tensor(bias)
    extra = f"; {mask_text(mask)} folded into the bias" if mask is not None else ""
    if head.dropout is not None:
        extra += "; dropout (identity as traced) as dropout_p"
    return (f"attention with an additive bias spelled as matmul, add, softmax, matmul "
            f"(scale {scale_text(sc)}; bias {list(b.shape)} {str(b.dtype)[6:]}{extra}) → "
            "runtime.biased_sdpa (SDPA's float attn_mask)")


SDPA_BIAS_PATTERN = Pattern("sdpa_bias", find_sdpa_bias,
                            "attention with an additive score bias → SDPA with attn_mask")
