"""The ``variant`` patterns' candidates (``Pattern.variant``: the 3xTF32 GEMM), part of
the ``library`` family: on a GPU with TF32 tensor cores, the variant's matches with the
base rewrite's other matches, that rewrite compiled around (``compiled_around.py``) and
replayed as a CUDA graph.

Not covered: variants on a CPU (none is offered); a GPU this process cannot see (its
capability is not checked here: that GPU's evaluation decides); a variant match that a
base match reaches beyond (left out; the base match stays).
"""

from __future__ import annotations

import torch

from solforge.search.candidates import SearchContext
from solforge.search.families.compiled_around import compiled_around
from solforge.search.families.render import COST, Wrap
from solforge.search.families.rewrite import library_candidate


# a GEMM's autotuning: eight tile configs compiled and timed on the first call
_VARIANT_COST = 20.0


def variant_candidates(ctx: SearchContext, base: str | None):
    """On a GPU, the ``variant`` patterns' matches (``Pattern.variant``: the 3xTF32 GEMM)
    as a candidate of their own: with the base rewrite's other matches
    (``<base>+<kind>``, derived from the base candidate), or alone where none is left; and
    that candidate replayed as a CUDA graph (``<name>+cuda_graphs``). A Triton launch
    costs tens of microseconds of Python: KernelBench's ``3_DeepNarrowMLP`` (17 GEMMs of
    about 65 us each) spent 2.1 ms a call on the host against 1.1 ms of kernels, and the
    judge's clock check failed it (benchmarks/results/2026-12-06-h100-s22); the replay
    launches them all at once."""
    if not ctx.gpu or not ctx.variant_matches:
        return
    if (cc := _capability(ctx.device)) is not None and cc < (8, 0):
        ctx.rewrite_errors.append(f"{ctx.variant_matches[0].kind}: this GPU (sm_{cc[0]}{cc[1]}) "
                                  "has no TF32 tensor cores for 3xTF32")
        return
    others = list(ctx.matches) if base else []
    variants = []
    for v in ctx.variant_matches:
        span = v.nodes | v.optional
        hit = [m for m in others if (m.nodes | m.optional) & span]
        # a variant takes over base matches it contains whole (a GEMM's bias + activation
        # epilogue); where a base match reaches beyond it (an attention around the GEMM),
        # the base match stays and the variant is left out
        if all((m.nodes | m.optional) <= span for m in hit):
            others = [m for m in others if m not in hit]
            variants.append(v)
    if not variants:
        return
    kinds = "+".join(dict.fromkeys(m.kind for m in variants))
    name = f"{base}+{kinds}" if others else kinds
    c = library_candidate(ctx, [*others, *variants], name,
                          base if others else None, extra_cost=_VARIANT_COST,
                          extra_why=" The reference's fp32 GEMMs run on the tensor cores "
                                    "at fp32 accuracy (3xTF32), their bias and activation "
                                    "in the GEMM's epilogue.")
    if c is None:
        return
    yield c
    compiled = compiled_around(ctx, [*others, *variants], name, extra_cost=_VARIANT_COST)
    if compiled is not None:
        yield compiled
    g = library_candidate(ctx, [*others, *variants], f"{name}+cuda_graphs", name,
                          wrap=Wrap(cuda_graphs=True), extra_levers=("cuda_graphs",),
                          extra_cost=_VARIANT_COST + COST["graphs"],
                          extra_why=" The reference's fp32 GEMMs run on the tensor cores at "
                                    "fp32 accuracy (3xTF32), replayed as a CUDA graph: no "
                                    "launch gaps between the kernels.")
    if g is not None:
        yield g


def _capability(device: str) -> tuple[int, int] | None:
    """The CUDA device's compute capability where this process sees it, else None (a
    candidate generated for a GPU elsewhere is left to that GPU's evaluation)."""
    try:
        return tuple(torch.cuda.get_device_capability(device)) \
            if torch.cuda.is_available() else None
    except (RuntimeError, AssertionError, ValueError):
        return None
