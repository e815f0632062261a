"""The families that wrap the reference's forward whole, whatever its graph holds: the
reference itself (``reference``), compiled (``compile``), replayed as CUDA graphs
(``cuda_graphs``) and with fp32 matmuls on TF32 tensor cores (``tf32``). None of them
needs a trace: an untraceable reference still gets them.

Not covered: convolution switches (``conv.py``); TorchInductor options beyond its modes
(``inductor.py``); anything that rewrites the graph (``library.py``).
"""

from __future__ import annotations

from solforge.search.candidates import SearchContext
from solforge.search.families.render import COST, Wrap, make_candidate
from solforge.search.reference_facts import (
    autotune_seconds,
    has_fp32_matmul,
    reads_values_on_host,
)


def reference_family(ctx: SearchContext):
    yield make_candidate(
        ctx, name="reference", family="reference", summary="the reference, unchanged",
        details=["Kept as the answer when no other candidate beats the baselines."],
        levers=[], cost=COST["reference"],
        reasoning="The reference itself: the floor every other candidate must beat, and the "
                  "honest answer when none does.")


def compile_family(ctx: SearchContext):
    cost = COST["compile_gpu" if ctx.gpu else "compile_cpu"]
    # compiled the way the evaluator compiles its baseline: this candidate is that baseline
    # as a solution, the one the search owes when torch.compile beat the reference
    # (``reorder.baseline_first``)
    mode = ctx.compile_mode
    yield make_candidate(
        ctx, name="compile", family="compile",
        summary=f"the reference compiled by TorchInductor (mode {mode!r}, the baseline's)",
        details=["Inductor fuses the elementwise work around GEMMs into generated kernels",
                 "(Triton on a GPU, C++/OpenMP on a CPU); each new shape compiles once,",
                 "inside the evaluator's warm-up."],
        levers=["compile"], cost=cost, wrap=Wrap(compile_mode=mode),
        reasoning="Generic operator fusion: fewer kernels and fewer round trips through "
                  "memory for the elementwise and reduction work, with no change to the "
                  "math beyond fp32 accumulation order.")
    if ctx.gpu and mode != "max-autotune-no-cudagraphs":
        tune = autotune_seconds(ctx)
        yield make_candidate(
            ctx, name="compile_max_autotune", family="compile", parent="compile",
            summary="the reference compiled with mode 'max-autotune-no-cudagraphs'",
            details=["Inductor benchmarks GEMM templates and Triton configurations for",
                     "each shape and keeps the fastest; compilation takes minutes."],
            levers=["compile", "compile_max_autotune", "autotune"],
            # at least coordinate descent's tuning: max-autotune tunes reductions too
            cost=COST["max_autotune"] if tune is None else COST["compile_gpu"] + max(tune, 15.0),
            compile_part=None if tune is None else COST["compile_gpu"],
            wrap=Wrap(compile_mode="max-autotune-no-cudagraphs"),
            reasoning="Compile's fusion plus autotuned GEMM and reduction configurations: "
                      "worth its compile time when GEMMs or large reductions dominate.")


def cuda_graphs_family(ctx: SearchContext):
    # a forward that reads tensor values on the host (a .tolist()) cannot be captured: its
    # candidate would spend an evaluation to learn what the source says
    # (benchmarks/results/2026-12-01-h200-s6)
    if not ctx.gpu or reads_values_on_host(ctx):
        return
    why = ("One graph replay instead of one launch per kernel: removes launch gaps and "
           "host overhead, which dominate small (decode-sized) workloads; the copies in "
           "and out of the static buffers cost a little device time.")
    details = ["One CUDA graph per input signature (shapes, strides, dtypes, devices; never",
               "addresses); inputs are copied into the graph's static buffers and outputs",
               "cloned out (solforge.search.runtime.CudaGraphed)."]
    yield make_candidate(ctx, name="cuda_graphs", family="cuda_graphs",
                         summary="the eager reference replayed as CUDA graphs",
                         details=details, levers=["cuda_graphs"], cost=COST["graphs"],
                         wrap=Wrap(cuda_graphs=True), reasoning=why)
    yield make_candidate(ctx, name="compile+cuda_graphs", family="cuda_graphs",
                         summary="the compiled reference replayed as CUDA graphs",
                         details=details, levers=["compile", "cuda_graphs"], parent="compile",
                         cost=COST["compile_gpu"] + COST["graphs"],
                         wrap=Wrap(compile_mode="default", cuda_graphs=True),
                         reasoning="Compile's fusion, then " + why[0].lower() + why[1:])


def tf32_family(ctx: SearchContext):
    if not ctx.problem.precision.allow_tf32 or not has_fp32_matmul(ctx):
        return
    details = [f"The precision class {ctx.problem.precision.name!r} admits TF32 for fp32",
               "matmuls and convolutions (10-bit mantissa, fp32 accumulation)."]
    why = ("fp32 GEMMs and convolutions on TF32 tensor cores run several times faster "
           "than on the fp32 units, and the precision class allows it.")
    yield make_candidate(ctx, name="tf32", family="tf32",
                         summary="fp32 matmuls and convolutions on TF32 tensor cores",
                         details=details, levers=["tf32"], cost=COST["flags"],
                         wrap=Wrap(tf32=True), reasoning=why)
    yield make_candidate(ctx, name="tf32+compile", family="tf32", parent="tf32",
                         summary="TF32 matmuls, and the reference compiled by TorchInductor",
                         details=details, levers=["tf32", "compile"],
                         cost=COST["compile_gpu" if ctx.gpu else "compile_cpu"] + 1,
                         wrap=Wrap(tf32=True, compile_mode="default"),
                         reasoning=why + " Compile fuses the work around them.")
