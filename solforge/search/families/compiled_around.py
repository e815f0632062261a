"""A ``library`` rewrite compiled around its calls (:func:`compiled_around`), and the
test of whether compile has anything to fuse there (:func:`_work_outside`: work of the
reference's other than views, GEMMs and convolutions, which Inductor hands to the library
as eager does). What it does not cover: :func:`compiled_around` says.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from solforge.search.candidates import Candidate, SearchContext
from solforge.search.families.render import COST, Wrap
from solforge.search.families.rewrite import library_candidate
from solforge.search.match import Match, substitute
from solforge.search.nodes import op


def compiled_around(ctx: SearchContext, matches: list[Match], base: str,
                    extra_cost: float = 0.0) -> Candidate | None:
    """``<base>+compile``: the rewrite under ``torch.compile``, which fuses the reference's
    own operations around the rewritten calls (a GEMM's scale, mask and activation after
    it, the copies of its transposes). Library (Triton) calls are left out of the
    compiled graphs (``torch.compiler.disable``: a graph break each, run as they are;
    ``make_candidate``): KernelBench's ``50_ReLUSelfAttention`` ran its 3xTF32 GEMMs with
    three eager passes over the 805 MB attention matrix between them, 0.71x of Inductor's
    fused program (benchmarks/results/2026-12-07-h100-s30).

    None where the rewrite leaves no work of the reference's between the calls
    (:func:`_work_outside`: a lone GEMM has nothing to fuse).

    Not covered: fusing into the library's kernels (Inductor sees them as opaque); CUDA
    graphs of the compiled rewrite."""
    triton = any(m.language == "triton" for m in matches)
    try:
        graph = substitute(ctx.traced, matches)
    except ValueError:  # the plain rewrite says why (``library_candidate``)
        return None
    if not _work_outside(graph):
        return None
    return library_candidate(
        ctx, matches, f"{base}+compile", base, wrap=Wrap(compile_mode="default"),
        extra_levers=("compile",),
        extra_cost=extra_cost + COST["compile_gpu" if ctx.gpu else "compile_cpu"],
        extra_why=" Compile fuses what is around the rewritten calls" +
                  (", which it runs as they are (a graph break each)." if triton else "."),
        graph=graph)


_EXTERN_FUNCTIONS = (F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
                     F.conv_transpose3d, torch.einsum, torch.addmm, torch.baddbmm)


def _extern(n: fx.Node) -> bool:
    """A GEMM or a convolution: Inductor calls the library's kernel for it as eager does,
    so compiling around it fuses nothing into it."""
    if op(n) in ("matmul", "linear"):
        return True
    if n.op == "call_module":
        return isinstance(n.meta.get("module"), nn.modules.conv._ConvNd)
    return n.op == "call_function" and n.target in _EXTERN_FUNCTIONS


def _work_outside(graph: fx.Graph) -> bool:
    """Whether a rewritten graph still computes a tensor that compile could fuse: a node
    of the reference's (its traced example value kept) whose value is a tensor that is
    not a view of another (``_base``: views, splits and transposes move no data) and that
    is no GEMM or convolution (:func:`_extern`), besides the library's calls (which carry
    no example value)."""
    for n in graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module") or _extern(n):
            continue
        vals = n.meta.get("val")
        vals = vals if isinstance(vals, (tuple, list)) else (vals,)
        if any(isinstance(v, torch.Tensor) and v._base is None for v in vals):
            return True
    return False
