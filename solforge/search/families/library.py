"""The ``library`` family: the traced graph with the patterns' matches substituted
(``patterns``, ``match.substitute``): every match together (``library``, or ``sdpa`` for
attention alone); on a GPU each kind alone where there are several, the low-precision
GEMMs on their own tensor cores and the rewrite replayed as CUDA graphs; the rewrite
compiled around its calls (``compiled_around.py``); then the variant patterns'
candidates (``variants.py``). Each candidate is made by ``rewrite.library_candidate``.

Not covered: an untraced reference (no graph, no candidate); Triton kernels compiled
around on a CPU (they would run under the interpreter: not worth it).
"""

from __future__ import annotations

from solforge.search.candidates import Candidate, SearchContext
from solforge.search.families.compiled_around import compiled_around
from solforge.search.families.render import COST, Wrap
from solforge.search.families.rewrite import SDPA_KINDS, library_candidate
from solforge.search.families.variants import variant_candidates
from solforge.search.patterns.lowp_gemm import find_lowp_gemm


def library_family(ctx: SearchContext):
    """The rewrite with every match (``library``, or ``sdpa`` for attention alone), each
    pattern's share of it on a GPU, its low-precision and wrapped forms; then the variant
    patterns' candidates (:func:`~solforge.search.families.variants.variant_candidates`)."""
    if ctx.traced is None:
        return
    base = None
    if ctx.matches:
        for c in _base_candidates(ctx):
            base = base or c.name
            yield c
    yield from variant_candidates(ctx, base)


def _base_candidates(ctx: SearchContext):
    triton = any(m.language == "triton" for m in ctx.matches)
    # an attention rewrite alone is named for SDPA, anything else for the library
    base = "sdpa" if not triton and {m.kind for m in ctx.matches} <= SDPA_KINDS \
        else "library"
    first = library_candidate(ctx, ctx.matches, base, None)
    if first is None:
        return
    yield first
    kinds = list(dict.fromkeys(m.kind for m in ctx.matches))
    if len(kinds) > 1 and ctx.gpu:  # each pattern's share of a gain: worth it on a GPU
        for kind in kinds:
            sub = [m for m in ctx.matches if m.kind == kind]
            c = library_candidate(ctx, sub, f"library:{kind}", base,
                                  extra_why=" Only this pattern, to see its share of the gain.")
            if c is not None:
                yield c
    if ctx.gpu and "lowp_gemm" in kinds:
        c = _native_lowp_candidate(ctx, base)
        if c is not None:
            yield c
    if not triton or ctx.gpu:  # Triton kernels under the CPU's interpreter: not worth it
        c = compiled_around(ctx, ctx.matches, base)
        if c is not None:
            yield c
    if ctx.gpu:
        c = library_candidate(ctx, ctx.matches, f"{base}+cuda_graphs", base,
                              wrap=Wrap(cuda_graphs=True), extra_levers=("cuda_graphs",),
                              extra_cost=COST["graphs"],
                              extra_why=" Replayed as a CUDA graph: no launch gaps between "
                                        "the kernels.")
        if c is not None:
            yield c


def _native_lowp_candidate(ctx: SearchContext, base: str) -> Candidate | None:
    """The rewrite with its low-precision GEMMs on their own tensor cores instead of TF32's
    (``patterns/lowp_gemm.py``): the same matches, found again with ``native=True``."""
    assert ctx.traced is not None
    native = iter(find_lowp_gemm(ctx.traced, native=True))
    try:
        matches = [next(native) if m.kind == "lowp_gemm" else m for m in ctx.matches]
    except StopIteration:  # not found again: nothing to offer
        return None
    return library_candidate(
        ctx, matches, f"{base}:lowp_tensor_cores", base, extra_cost=0.1,
        extra_why=" On the operands' own tensor cores (torch._scaled_mm for FP8, "
                  "torch._int_mm for int8, a 16-bit GEMM with fp32 output), which run "
                  "these GEMMs at twice TF32's rate or more; shapes they do not take fall "
                  "back to TF32.")
