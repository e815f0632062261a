"""The ``rowfuse`` family: a forward that is one row program (``rowfuse.classify``) with a
reduction, written as one generated Triton kernel and its launcher (``rowfuse.codegen``):
every input read once, each row's reductions in registers, column reductions summed per
program in fp32 and the programs' partial rows summed after. Inductor reads the inputs of
a row reduction and a column reduction of the same tensors twice (the norm backwards: a
GPU survey found its best at 0.43-0.65 of the memory roofline); training kernels (Apex,
Liger, Triton's layer-norm tutorial) do one pass.

Offered on a GPU, for row programs with a column reduction or a reduction over a row (a
purely pointwise one TorchInductor already fuses at the roofline). Its refusal reason is
kept in ``ctx.declined`` for the search log.

Not covered: a CPU (the kernel would run under Triton's interpreter: not worth timing;
tests generate it for a GPU context and run the file under the interpreter); an untraced
reference; a tile choice per row count (the autotuner keys on the row length ``N`` and
the dtypes: the first launch at an ``N`` picks the tile for every row count after it).
"""

from __future__ import annotations

from typing import Any

import torch

from solforge.bench.measure.inputs import make_inputs
from solforge.search.candidates import Candidate, SearchContext
from solforge.search.emit import BASE_IMPORTS, copied_names, standalone_file
from solforge.search.families.render import COST
from solforge.search.fxsource import EmitError, forward_source
from solforge.search.rowfuse.classify import classify
from solforge.search.rowfuse.codegen import kernel_source, launching_graph
from solforge.search.rowfuse.program import RowProgram

# the levers it pulls (candidates.LEVERS): one fused kernel, its tile autotuned
PULLED = ("fusion", "autotune")

IMPORTS = ["import triton", "import triton.language as tl",
           "from solforge.kernels.triton._common import (cast_rne, fitting_row_tiles, "
           "row_tile_configs, sm_count)"]
# the names the kernel's file binds itself; the reference's file must not define one
BOUND = ("_rowfuse_kernel", "_rowfuse", "_rounded", "_tanh", "cast_rne", "fitting_row_tiles",
         "row_tile_configs", "sm_count")


def workload_shapes(ctx: SearchContext) -> list[list[tuple | None]]:
    """The forward's input shapes at each traced workload but the first (whose shapes
    the graph holds), built on the meta device; a workload whose inputs cannot be built
    there is left out (its graph agreed with the first's)."""
    assert ctx.traced is not None
    out = []
    for name in ctx.traced.workloads[1:]:
        try:
            xs = make_inputs(ctx.module, ctx.problem.workload(name).params, 0, "normal",
                             torch.device("meta"))
        except Exception:  # noqa: BLE001 - values read while building: not on meta
            continue
        out.append([tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in xs])
    return out


def row_program(ctx: SearchContext) -> tuple[RowProgram | None, str]:
    """The reference as a row program, or why it is not one."""
    if ctx.traced is None:
        return None, "the reference was not traced"
    return classify(ctx.traced.graph, workload_shapes(ctx))


def rowfuse_candidate(ctx: SearchContext, prog: RowProgram) -> Candidate:
    """The solution file: the kernel and launcher at module level, ``forward`` calling
    the launcher with the inputs and parameters, then what PyTorch computes after it."""
    assert ctx.traced is not None
    taken = copied_names(ctx.problem.path)
    kernel, launcher = "_rowfuse_kernel", "_rowfuse"
    if taken & set(BOUND):
        raise EmitError("the reference's file defines names the kernel's file binds")

    def launch(*args: Any) -> Any:  # the graph's call target; the file defines its own
        raise NotImplementedError

    forward = forward_source(launching_graph(ctx.traced.graph, prog, launch),
                             {launch: launcher})
    prelude = kernel_source(prog, kernel, launcher, ctx.problem.name).splitlines()
    row_ops = sorted({s.op for s in prog.steps})
    summary = "the whole forward as one generated Triton kernel, one pass over the rows"
    details = [f"Each program takes a block of rows of {prog.row_input}, BLOCK_M rows a step "
               "(autotuned with num_warps per row length); it computes every node of the "
               "reference in fp32 (rounded where eager rounds) with the rows in registers",
               f"({', '.join(row_ops)}); column reductions are summed per program in fp32 "
               "and the partial rows summed after."]
    source = standalone_file(problem=ctx.problem.name, candidate="rowfuse", summary=summary,
                             details=details, levers=list(PULLED),
                             reference_path=ctx.problem.path,
                             imports=[*BASE_IMPORTS, *IMPORTS], forward=forward,
                             prelude=prelude)
    return Candidate(name="rowfuse", family="rowfuse", levers=list(PULLED),
                     cost=COST["library"] + COST["library_fn"], source=source,
                     language="triton",
                     reasoning="TorchInductor does not fuse a reduction over each row with "
                               "one over all rows of the same inputs: it reads them twice. "
                               "One kernel reads every input once and keeps the column "
                               "sums in registers, as training kernels do.")


def rowfuse_family(ctx: SearchContext):
    """One ``rowfuse`` candidate on a GPU where the forward is a row program with a
    reduction; else none, and the reason in ``ctx.declined``."""
    if not ctx.gpu or ctx.traced is None:
        return
    prog, why = row_program(ctx)
    if prog is not None and not prog.has_reduction:
        prog, why = None, "a pointwise row program (TorchInductor fuses it already)"
    if prog is None:
        ctx.declined.append(f"rowfuse: {why}")
        return
    try:
        yield rowfuse_candidate(ctx, prog)
    except EmitError as e:
        ctx.rewrite_errors.append(f"rowfuse: the kernel's file cannot be written: {e}")
