"""One ``library`` candidate from pattern matches: the traced graph with the matches
substituted (``match.substitute``), its levers, cost, summary and reasoning, rendered as a
standalone file (``render.py``). Every candidate of the ``library`` family is made here:
the base rewrite, each kind alone, the wrapped forms and the variants.

A match that cannot be substituted, or a graph the file cannot spell (a tensor constant),
gives no candidate and a line in ``ctx.rewrite_errors`` (the search logs it as
``rewrite_failed``). Not covered: which matches go together or under which wrap (the
callers: ``library.py``, ``variants.py``, ``compiled_around.py``); whether the rewrite
computes the reference's numbers (each pattern checks its own exactness; the evaluator
judges).
"""

from __future__ import annotations

import torch.fx as fx

from solforge.search.candidates import LEVERS, Candidate, SearchContext
from solforge.search.families.render import COST, Wrap, make_candidate
from solforge.search.fxsource import EmitError
from solforge.search.match import LIBRARY_MODULE, LibraryFunction, Match, substitute

# the attention patterns that route to PyTorch's SDPA (no library kernel): a rewrite of
# these alone is named and summarised for SDPA
SDPA_KINDS = {"sdpa", "sdpa_bias", "gqa", "mha_no_weights"}


def library_candidate(ctx: SearchContext, matches: list[Match], name: str,
                      parent: str | None, wrap: Wrap | None = None,
                      extra_levers: tuple[str, ...] = (), extra_cost: float = 0.0,
                      extra_why: str = "", graph: fx.Graph | None = None
                      ) -> Candidate | None:
    """The candidate of ``matches`` substituted into the traced graph (``graph``: that
    substitution, made already by the caller)."""
    if graph is None:
        try:
            graph = substitute(ctx.traced, matches)
        except ValueError as e:  # a match whose outputs are needed before it ends
            ctx.rewrite_errors.append(f"{name}: substituting the matches failed: {e}")
            return None
    calls = tuple(c for m in matches for c in m.calls)
    triton = any(isinstance(c, LibraryFunction) and c.module == LIBRARY_MODULE for c in calls)
    levers = sorted({lv for m in matches for lv in m.levers} | set(extra_levers),
                    key=LEVERS.index)
    if triton and ctx.gpu and "autotune" not in levers:
        levers.append("autotune")  # the library's kernels autotune block sizes and warps
    fns = {getattr(c, "name", getattr(c, "__name__", "")) for c in calls}
    cost = (COST["library"] + COST["library_fn"] * len(fns) if triton else COST["sdpa"])
    details = [f"- {m.description}" for m in matches]
    details += [f"Traced with torch.fx on the visible workloads {', '.join(ctx.traced.workloads)}",
                "(dtypes as traced); the rest of forward is the reference's own graph."]
    kinds = ", ".join(dict.fromkeys(m.kind for m in matches))
    why = (f"The reference's graph spells out {kinds} as several eager operations; the "
           "substitute does each in one kernel, so fewer launches and fewer bytes moved.")
    if kinds == "lowp_gemm":
        why = ("The reference multiplies FP8/int8/16-bit operands on the fp32 units; TF32 "
               "tensor cores compute the same products exactly, several times faster.")
    kinds_found = {m.kind for m in matches}
    summary = ("library kernels substituted into the traced graph" if triton
               else "attention routed to fused scaled_dot_product_attention"
               if kinds_found <= SDPA_KINDS
               else "operations routed to faster PyTorch calls with the same result")
    try:
        return make_candidate(ctx, name=name, family="library", summary=summary,
                              details=details, levers=levers, cost=cost + extra_cost,
                              graph=graph, calls=calls, wrap=wrap, parent=parent,
                              reasoning=why + extra_why)
    except EmitError as e:  # a value the file cannot spell (a tensor constant): no candidate
        ctx.rewrite_errors.append(f"{name}: the rewritten graph cannot be written as a "
                                  f"file: {e}")
        return None
