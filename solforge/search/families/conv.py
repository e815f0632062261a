"""The ``conv`` family: switches for a reference's convolutions, applied around its
forward (no rewrite): cuDNN's algorithm chosen by timing (GPU) and the weights and inputs
in channels-last order (NHWC for 2-D, NDHWC for 3-D), each alone and under compile.

Not covered: 1-D convolutions' layout (no channels-last order for 3-D tensors); a
reference with both 2-D and 3-D convolutions gets no layout candidate; convolution
kernels of the library's own (``library.py``, through its patterns).
"""

from __future__ import annotations

from solforge.search.candidates import SearchContext
from solforge.search.families.render import COST, Wrap, make_candidate
from solforge.search.reference_facts import conv_kinds


def conv_family(ctx: SearchContext):
    """cuDNN's algorithms by timing (GPU), alone and under compile; the weights and inputs
    of 2-D or 3-D convolutions in channels-last order, alone and under compile (not
    for a reference with both ranks: ``Module.to`` takes one order for 4-D and 5-D
    tensors alike)."""
    kinds = conv_kinds(ctx)
    if not kinds:
        return
    bench = ctx.gpu
    compiled = COST["compile_gpu" if ctx.gpu else "compile_cpu"]
    if bench:
        details = ["torch.backends.cudnn.benchmark during the forward: the first call of a",
                   "shape times cuDNN's algorithms and keeps the fastest."]
        why = ("cuDNN's default heuristic often misses the fastest algorithm for a given "
               "shape; timing them once per shape finds it.")
        yield make_candidate(
            ctx, name="cudnn_benchmark", family="conv",
            summary="cuDNN picks each convolution's algorithm by timing them",
            details=details, levers=["cudnn_benchmark"], cost=COST["flags"],
            wrap=Wrap(cudnn_benchmark=True), reasoning=why)
        # Inductor leaves convolutions to ATen, which reads the switch when the compiled
        # program runs: its fused epilogues with the timed algorithm (KernelBench's 3-D
        # convolutions kept torch.compile at 1.00x, benchmarks/results/2026-12-07-h100-s30)
        yield make_candidate(
            ctx, name="cudnn_benchmark+compile", family="conv", parent="cudnn_benchmark",
            summary="cuDNN's algorithms by timing, the rest compiled by TorchInductor",
            details=details, levers=["cudnn_benchmark", "compile"], cost=compiled + 1,
            wrap=Wrap(cudnn_benchmark=True, compile_mode="default"),
            reasoning=why + " Compile fuses the work after the convolutions.")
    if 2 in kinds and 3 in kinds or not kinds & {2, 3}:
        return
    three = 3 in kinds
    name = "channels_last_3d" if three else "channels_last"
    levers = ["channels_last"] + (["cudnn_benchmark"] if bench else [])
    order = "NDHWC" if three else "NHWC"
    details = [f"Conv weights and {5 if three else 4}-D inputs in {order} memory order: "
               "tensor-core convolutions",
               f"(and oneDNN on a CPU) work in {order} natively, so no layout transposes."]
    layout = {"channels_last_3d": three, "channels_last": not three}
    yield make_candidate(ctx, name=name, family="conv",
                         parent="cudnn_benchmark" if bench else None,
                         summary=f"convolutions in channels-last ({order}) memory order",
                         details=details, levers=levers, cost=COST["channels_last"],
                         wrap=Wrap(cudnn_benchmark=bench, **layout),
                         reasoning=f"{'NCDHW' if three else 'NCHW'} convolutions pay for "
                                   f"transposes around {order} kernels; channels-last "
                                   "weights and inputs remove them.")
    yield make_candidate(ctx, name=f"{name}+compile", family="conv", parent=name,
                         summary="channels-last convolutions, the rest compiled by TorchInductor",
                         details=details, levers=levers + ["compile"], cost=compiled + 2,
                         wrap=Wrap(cudnn_benchmark=bench, compile_mode="default", **layout),
                         reasoning="Channels-last convolutions, and compile fuses the "
                                   "normalisation and activation work after them.")
