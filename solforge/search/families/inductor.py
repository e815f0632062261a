"""The ``inductor`` family: the reference compiled with TorchInductor settings that its
modes do not reach, each one candidate, kept only if the evaluator measures it faster.

==============================  ==========================================  ==================
candidate                       options                                     applies to
==============================  ==========================================  ==================
``inductor:coordinate_descent`` ``coordinate_descent_tuning``: after the    GPU: every problem
                                heuristic config, Triton block sizes and
                                warps tuned one at a time by timing
``inductor:freezing``           ``freezing`` (parameters as constants:      problems with
                                weights pre-packed, conv/BN folded in       parameters and a
                                eval mode, layouts optimised end to end)    matmul or conv
``blas:cublaslt``               not Inductor: the eager reference with      GPU: problems with a
                                cuBLASLt as PyTorch's BLAS library          matmul or conv
``inductor:autotune_templates`` ``max_autotune`` with the GEMM/conv         GPU: problems with a
                                template backends (``ATEN,TRITON``) and     matmul or conv
                                coordinate descent, no CUDA graphs
``inductor:reference_layout``   ``layout_optimization`` off: the            GPU: problems with
                                convolutions keep the reference's memory    a convolution
                                format, so cuDNN picks the algorithm it
                                picks in eager (the same rounding), while
                                the norms, activations and residual adds
                                around them still fuse
==============================  ==========================================  ==================

Why ``inductor:reference_layout``: on a GPU Inductor turns convolutions channels-last by
default, and cuDNN then runs another algorithm. Under PyTorch's default TF32 for cuDNN
convolutions two algorithms round differently, far past an fp32 tolerance of 1e-4
(KernelBench's ResNet basic block on the H200: 36.5% of elements out, session 14), so the
plain compile candidate fails where the fusion around the convolutions would still pay.
What it does not promise: that cuDNN's heuristic choice is the same when the compiled
graph hands it other strides (non-contiguous inputs); the evaluator decides.

Each candidate's options are only those the installed TorchInductor knows
(``torch._inductor.config``): an option a version lacks drops its candidate rather than
fail at compile time. Freezing applies where autograd is off (the evaluator runs the
forward under ``torch.no_grad``); with gradients on it compiles as plain ``compile``.

No candidate for a reference the tracer could not follow (its graph decides which
settings could pay). Not covered: per-shape choice inside one candidate (each candidate holds its options for
every workload; the evaluator's workloads decide between candidates); split-reduction and
epilogue-fusion switches (on by default in Inductor: turning them off has not been seen to
win); Inductor's own config search (``torch._inductor.config`` has no public API for it).
"""

from __future__ import annotations

from typing import Any

from solforge.search.candidates import SearchContext
from solforge.search.families.render import COST, Wrap, make_candidate
from solforge.search.reference_facts import autotune_seconds, conv_kinds, has_matmul

# seconds beyond one plain compile (whose part of each cost, ``COST["compile_gpu"]``, is
# estimated from the problem's measured compiles: ``budget.estimated_seconds``). From an
# H100 (benchmarks/results/2026-12-07-h100-s32/call3): coordinate descent's first call took
# 0.3-8.6 s more than the plain compile's on five KernelBench problems, freezing's none;
# max-autotune's templates ``reference_facts.autotune_seconds`` per GEMM and convolution.
# The BLAS switch, no compile at all, goes after the library rewrites (2 s): it rarely
# beats a rewrite.
TUNING_S = {"coordinate_descent": 15.0, "freezing": 5.0, "reference_layout": 0.0}
COST_TUNED = {"blas": 5.0, **{k: COST["compile_gpu"] + v for k, v in TUNING_S.items()}}


def _tuned(kind: str) -> dict[str, float]:
    """``cost`` and ``compile_part`` of an Inductor-option candidate of ``kind``."""
    return {"cost": COST_TUNED[kind], "compile_part": COST["compile_gpu"]}


def _known(options: dict[str, Any]) -> bool:
    """Every option is one the installed TorchInductor has."""
    try:
        from torch._inductor import config
    except ImportError:
        return False
    return all(hasattr(config, k) for k in options)


def _has_parameters(ctx: SearchContext) -> bool:
    assert ctx.traced is not None
    return any(True for _ in ctx.traced.module.parameters()) or any(
        True for _ in ctx.traced.module.buffers())


def inductor_family(ctx: SearchContext):
    if ctx.traced is None:
        # what the graph holds decides which settings could pay; an untraced reference
        # (data-dependent control flow) rarely settles under torch.compile at all
        return
    details = ["TorchInductor with options its modes do not set; the candidate is the",
               "reference's forward under torch.compile(options=...)."]
    if ctx.gpu:
        opts = {"coordinate_descent_tuning": True}
        if _known(opts):
            yield make_candidate(
                ctx, name="inductor:coordinate_descent", family="inductor", parent="compile",
                summary="compiled with coordinate-descent tuning of its Triton kernels",
                details=details, levers=["compile", "inductor_tuning", "autotune"],
                **_tuned("coordinate_descent"),
                wrap=Wrap(compile_options=tuple(opts.items())),
                reasoning="Inductor picks each generated kernel's block sizes and warps by "
                          "heuristic; tuning them one at a time by timing often gains on "
                          "reductions and pointwise chains at shapes the heuristic misses.")
    if _has_parameters(ctx) and has_matmul(ctx):
        opts = {"freezing": True}
        if _known(opts):
            yield make_candidate(
                ctx, name="inductor:freezing", family="inductor", parent="compile",
                summary="compiled with freezing: parameters as constants",
                details=details + ["Weights are constants: pre-packed, BatchNorm folded into",
                                   "convolutions in eval mode, layouts chosen end to end."],
                levers=["compile", "freezing"], **_tuned("freezing"),
                wrap=Wrap(compile_options=tuple(opts.items())),
                reasoning="With the weights known at compile time Inductor folds and "
                          "pre-packs them, and optimises tensor layouts for the whole graph "
                          "(channels-last end to end for convolutions).")
    if ctx.gpu and has_matmul(ctx):
        opts = {"max_autotune": True, "max_autotune_gemm_backends": "ATEN,TRITON",
                "coordinate_descent_tuning": True}
        yield make_candidate(
            ctx, name="blas:cublaslt", family="inductor",
            summary="the reference with cuBLASLt as the preferred BLAS library",
            details=["torch.backends.cuda.preferred_blas_library('cublaslt') during the",
                     "forward: cuBLASLt's heuristics and fused bias epilogues for its GEMMs."],
            levers=["blas_choice"], cost=COST_TUNED["blas"], wrap=Wrap(blas="cublaslt"),
            reasoning="PyTorch calls cuBLAS by default; cuBLASLt picks from more algorithms "
                      "and fuses the bias add, which can win at some shapes.")
        if _known(opts):
            tune = autotune_seconds(ctx) or 0.0  # the family runs on traced references
            yield make_candidate(
                ctx, name="inductor:autotune_templates", family="inductor",
                parent="compile_max_autotune",
                summary="max-autotune with Triton GEMM/conv templates and coordinate descent",
                details=details + ["Inductor benchmarks its Triton GEMM and convolution",
                                   "templates against the library kernels per shape and keeps",
                                   "the fastest, epilogues fused into the templates."],
                levers=["compile", "compile_max_autotune", "inductor_tuning", "autotune"],
                cost=COST["compile_gpu"] + TUNING_S["coordinate_descent"] + tune,
                compile_part=COST["compile_gpu"],
                wrap=Wrap(compile_options=tuple(opts.items())),
                reasoning="A Triton template can fuse the bias, activation and scaling after "
                          "a GEMM or convolution into its epilogue, which a library call "
                          "cannot; timing decides per shape.")
    if ctx.gpu and conv_kinds(ctx):
    # (Inductor optimises layouts for CUDA convolutions only: on a CPU this is plain compile)
        opts = {"layout_optimization": False}
        if _known(opts):
            yield make_candidate(
                # no parent: it is the answer when plain compile fails on the numerics,
                # and a candidate whose parent failed is skipped
                ctx, name="inductor:reference_layout", family="inductor",
                summary="compiled with the convolutions in the reference's memory format",
                details=details + ["layout_optimization off: no channels-last conversion,",
                                   "so cuDNN runs the algorithm eager runs (same rounding)",
                                   "while the ops around the convolutions still fuse."],
                levers=["compile", "inductor_tuning"], **_tuned("reference_layout"),
                wrap=Wrap(compile_options=tuple(opts.items())),
                reasoning="Inductor's channels-last layout makes cuDNN pick another "
                          "convolution algorithm, whose TF32 rounding can fail an fp32 "
                          "tolerance; keeping the reference's layout keeps its numerics "
                          "and still fuses the norms and activations around it.")
