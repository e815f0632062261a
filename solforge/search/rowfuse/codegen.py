"""A row program (``program.py``) as source a kernel engineer can read: one Triton kernel
and its Python launcher (:func:`kernel_source`), and the forward that calls the launcher
(:func:`launching_graph`: the reference's graph with the kernel's work replaced by one
call, printed by ``fxsource``; what PyTorch computes after the kernel, per column, stays
the reference's own code).

The kernel: program ``pid`` takes rows ``[pid * rows_per_program, ...)`` and walks them
``BLOCK_M`` at a time: a row value is a ``[BLOCK_M, BLOCK_N]`` tile (``BLOCK_N`` the row
length rounded up to a power of two), a per-row value ``[BLOCK_M, 1]``, a column value
``[1, BLOCK_N]``; columns past ``N`` and rows past the program's last are masked (a
chunk need not be a multiple of ``BLOCK_M``, nor as long). Column inputs and what is
computed from them alone are loaded once per program; per tile, the row and per-row
inputs are loaded (64-bit offsets), every step computed in fp32 and rounded to the
reference's 16-bit dtype after each node that eager PyTorch rounds, outputs stored under
the mask (a per-row output as ``[BLOCK_M, 1]`` under the row mask); each column
reduction adds the tile's column sums (masked lanes 0) to an fp32 register row, stored
as the program's row of a ``[programs, N]`` partials buffer, which the launcher sums (a
mean divides by the row count) and casts to the reference's dtype.
Programs: ``PROGRAMS_PER_SM`` per SM, at most one per row; the grid does not depend on
``BLOCK_M``.

``BLOCK_M`` (1-32) and ``num_warps`` (4-16) are autotuned per row length ``N`` (and the
dtypes) among the configs whose tile suits ``N`` (``row_tile_configs`` and
``fitting_row_tiles`` of ``solforge.kernels.triton._common``); under
``TRITON_INTERPRET=1`` there is one config, 2 rows a tile. Every launch writes the
outputs and partials whole, so the autotuner's trial launches are harmless.

Not covered: a tile choice per row count (the autotuner's key is ``N``: the first launch
at a row length picks the tile for the row counts after it, though the rows per program
change with the row count); non-contiguous inputs are copied (``.contiguous()``) rather
than addressed by their strides; rows longer than 65536 (the launcher refuses them: a row
lives in registers); a row split over several programs (one long row runs on one SM).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from solforge.search.rowfuse.kernel_ops import step_lines
from solforge.search.rowfuse.program import COLUMN_OPS, Kind, RowProgram, Step, Value

# programs per SM: enough rows in flight to hide memory latency, few enough that the
# partial rows of a column reduction stay a small fraction of the traffic (the Triton
# layer-norm tutorial's backward and Liger's RMSNorm use the SM count times a few)
PROGRAMS_PER_SM = 4
# names the kernel and launcher bind themselves: a value of the forward must not take one
RESERVED = {"pid", "lanes", "cols", "col_mask", "mask", "row_mask", "rows_idx", "offs",
            "start", "first", "last", "N", "rows", "rows_per_program", "BLOCK_N", "BLOCK_M",
            "tl", "triton", "torch", "cast_rne", "sm_count", "row_tile_configs",
            "fitting_row_tiles", "range", "float", "programs", "device", "lead", "n", "per",
            "block"}
_TL = {torch.float32: "tl.float32", torch.float16: "tl.float16",
       torch.bfloat16: "tl.bfloat16"}
_ROUNDED = (torch.float16, torch.bfloat16)

HELPERS = '''@triton.jit
def _rounded(x, dtype: tl.constexpr):
    """fp32 ``x`` rounded to ``dtype`` and back: eager PyTorch rounds after every op."""
    return cast_rne(x, dtype).to(tl.float32)


@triton.jit
def _tanh(x):
    # Triton's core has no tanh; exp overflows to inf for large |x| and 1 - 2/inf is 1
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)'''


def describe(n: fx.Node) -> str:
    """A reference node as a line of Python, for the kernel's comments."""
    def a(x: Any) -> str:
        if isinstance(x, fx.Node):
            return x.name
        if isinstance(x, (list, tuple)):
            return "(" + ", ".join(a(y) for y in x) + ("," if len(x) == 1 else "") + ")"
        return repr(x)
    args = [a(x) for x in n.args] + [f"{k}={a(v)}" for k, v in n.kwargs.items()]
    if n.op == "call_method":
        return f"{n.name} = {args[0]}.{n.target}({', '.join(args[1:])})"
    if n.op == "call_module":
        return f"{n.name} = self.{n.target}({', '.join(args)})"
    name = getattr(n.target, "__name__", str(n.target))
    return f"{n.name} = {name}({', '.join(args)})"


def _stored_name(i: int) -> str:
    return f"out{i}"


def _step(s: Step) -> list[str]:
    lines = [f"# {describe(s.node)}"]
    body = step_lines(s)
    if s.out.dtype in _ROUNDED:
        head, _, expr = body[-1].partition(" = ")
        body[-1] = f"{head} = _rounded({expr}, {_TL[s.out.dtype]})"
    return lines + body


def _loads(srcs: list[Value], kinds: tuple[Kind, ...]) -> list[str]:
    """The loads of the sources of ``kinds``, each into fp32: a column vector is
    ``[1, BLOCK_N]``, a per-row input ``[BLOCK_M, 1]``, a row input the whole tile; masked
    lanes (columns past ``N``, rows past the program's last) read 0."""
    where = {Kind.COL: ("cols", "col_mask"), Kind.ROWSTAT: ("rows_idx", "row_mask"),
             Kind.ROW: ("offs", "mask")}
    out = []
    for v in srcs:
        if v.kind not in kinds:
            continue
        if v.kind is Kind.SCALAR:
            out.append(f"{v.name} = tl.load({v.name}_ptr).to(tl.float32)")
        else:
            at, mask = where[v.kind]
            out.append(f"{v.name} = tl.load({v.name}_ptr + {at}, mask={mask}, other=0.0)"
                       ".to(tl.float32)")
    return out


def kernel_source(prog: RowProgram, kernel: str, launcher: str, origin: str) -> str:
    """The kernel ``kernel`` and its launcher ``launcher(*sources, *attrs)``, which
    returns the stored outputs and then the column reductions' results. ``origin``
    names the reference, for the docstrings."""
    srcs = [s.value for s in prog.sources]
    cols = prog.column_steps
    stored = [st.value for st in prog.stored]
    attrs = [c.text for c in prog.attrs]
    per_col = [s for s in prog.steps if s.out.kind in (Kind.COL, Kind.SCALAR)
               and s.op not in COLUMN_OPS]
    per_row = [s for s in prog.steps if s not in per_col]
    params = [f"{v.name}_ptr" for v in srcs] + [f"{_stored_name(i)}_ptr"
                                                for i in range(len(stored))]
    params += [f"{s.out.name}_part_ptr" for s in cols] + attrs
    k = ["# BLOCK_M (rows per tile) and num_warps tuned per row length N and dtypes; the",
         "# kernel writes every output whole on each launch (no atomics, nothing added to",
         "# an output), so the autotuner's repeated trial launches leave the right results",
         '@triton.autotune(configs=row_tile_configs(), key=["N"],',
         '                 prune_configs_by={"early_config_prune": fitting_row_tiles})',
         "@triton.jit", f"def {kernel}(",
         f"    # inputs: {', '.join(v.name for v in srcs)}; outputs: "
         f"{', '.join(v.name for v in stored) or 'none'}; column partials: "
         f"{', '.join(s.out.name for s in cols) or 'none'}",
         *(f"    {p}," for p in params),
         "    rows, N, rows_per_program,", "    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,",
         "):",
         "    pid = tl.program_id(0)",
         "    lanes = tl.arange(0, BLOCK_N)",
         "    cols = lanes[None, :]  # [1, BLOCK_N]: a tile's columns",
         "    col_mask = cols < N"]
    body = ["# column inputs and what they alone give: once per program, [1, BLOCK_N]",
            *_loads(srcs, (Kind.COL, Kind.SCALAR))]
    for s in per_col:
        body += _step(s)
    for s in cols:
        body.append(f"{s.out.name}_acc = tl.zeros([BLOCK_N], dtype=tl.float32)")
    body += ["first = pid * rows_per_program",
             "last = tl.minimum(first + rows_per_program, rows)",
             "# BLOCK_M rows a step: values [BLOCK_M, BLOCK_N], per-row ones [BLOCK_M, 1];",
             "# rows past `last` are masked like columns past N",
             "for start in range(first, last, BLOCK_M):",
             "    rows_idx = start + tl.arange(0, BLOCK_M)[:, None]  # [BLOCK_M, 1]",
             "    row_mask = rows_idx < last",
             "    mask = row_mask & col_mask",
             "    offs = rows_idx.to(tl.int64) * N + cols  # 64-bit: rows * N may pass 2**31"]
    loop = _loads(srcs, (Kind.ROW, Kind.ROWSTAT))
    for s in per_row:
        if s.op in COLUMN_OPS:
            loop += [f"# {describe(s.node)}: this program's rows, summed in fp32",
                     f"{s.out.name}_acc += tl.sum(tl.where(mask, {s.args[0].name}, 0.0), "
                     "axis=0)"]
        else:
            loop += _step(s)
    for i, v in enumerate(stored):
        ptr = f"{_stored_name(i)}_ptr"
        where, mask = ("offs", "mask") if v.kind is Kind.ROW else ("rows_idx", "row_mask")
        loop.append(f"tl.store({ptr} + {where}, cast_rne({v.name}, "
                    f"{ptr}.dtype.element_ty), mask={mask})")
    body += [f"    {x}" for x in loop]
    for s in cols:
        body.append(f"tl.store({s.out.name}_part_ptr + pid.to(tl.int64) * N + lanes, "
                    f"{s.out.name}_acc, mask=lanes < N)")
    k += [f"    {x}" for x in body]
    return "\n".join([HELPERS, "", "", *k, "", "", _launcher(prog, kernel, launcher, origin)])


def _launcher(prog: RowProgram, kernel: str, launcher: str, origin: str) -> str:
    srcs = [s.value for s in prog.sources]
    names = [v.name for v in srcs] + [c.text for c in prog.attrs]
    first = prog.row_input
    lines = [f"def {launcher}({', '.join(names)}):",
             f'    """{origin}\'s forward as one pass over the rows of {first} (its last '
             'dim);',
             "    returns the per-row outputs, then the column reductions' results."
             '"""',
             f"    n, lead = {first}.shape[-1], {first}.shape[:-1]",
             f"    rows = {first}.numel() // n if n else 0",
             "    if n > 65536:",
             "        raise ValueError(f'rows of {n} elements: this kernel keeps a row in "
             "registers')"]
    for v in srcs:
        if v.kind is Kind.ROW and v.name != first:
            lines.append(f"    if {v.name}.shape != {first}.shape:")
            lines.append(f"        raise ValueError('{v.name} and {first} differ in shape')")
        want = {Kind.ROW: None, Kind.ROWSTAT: "rows", Kind.COL: "n", Kind.SCALAR: "1"}
        if want[v.kind] is not None:
            lines.append(f"    if {v.name}.numel() != {want[v.kind]}:")
            lines.append(f"        raise ValueError('{v.name} has the wrong size')")
        lines.append(f"    {v.name} = {v.name}.contiguous()")
    lines += [f"    device = {first}.device",
              f"    programs = max(1, min({PROGRAMS_PER_SM} * sm_count(str(device)), rows))",
              "    per = max(1, -(-rows // programs))",
              "    programs = max(1, -(-rows // per))  # none left without a row"]
    outs = []
    for i, v in enumerate(st.value for st in prog.stored):
        shape = ("(rows, n)" if v.kind is Kind.ROW else "(rows,)")
        lines.append(f"    {_stored_name(i)} = torch.empty({shape}, dtype={v.dtype}, "
                     "device=device)")
        outs.append(_out_view(v, _stored_name(i)))
    for s in prog.column_steps:
        lines.append(f"    {s.out.name}_part = torch.empty((programs, n), "
                     "dtype=torch.float32, device=device)")
    args = names[:len(srcs)] + [_stored_name(i) for i in range(len(prog.stored))] + \
        [f"{s.out.name}_part" for s in prog.column_steps] + names[len(srcs):]
    lines += ["    block = triton.next_power_of_2(max(n, 1))",
              f"    {kernel}[(programs,)](",
              f"        {', '.join(args)},",
              "        rows, n, per, BLOCK_N=block)  # BLOCK_M, num_warps: autotuned"]
    for s in prog.column_steps:
        total = f"{s.out.name}_part.sum(0)"
        if s.op == "colmean":
            total = f"({total} / rows)"
        outs.append(f"{total}.to({s.out.dtype})")
    lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    return "\n".join(lines)


def _out_view(v: Value, name: str) -> str:
    if v.kind is Kind.ROW:
        return f"{name}.view(rows, n)" if v.flat else f"{name}.view(*lead, n)"
    lead = "rows" if v.flat else "*lead"
    return f"{name}.view({lead}, 1)" if v.keepdim else f"{name}.view({lead})"


def launching_graph(graph: fx.Graph, prog: RowProgram, launcher: Callable) -> fx.Graph:
    """``graph`` with the kernel's work replaced by one call of ``launcher``: its results
    take the place of the stored outputs and the column reductions; the nodes PyTorch
    still runs (guards, what follows a column reduction) are the reference's."""
    output = next(n for n in graph.nodes if n.op == "output")
    by_name = {n.name: n for n in graph.nodes}
    provided = [by_name[st.node] for st in prog.stored] + [s.node for s in prog.column_steps]
    roots = [output] + [n for n in graph.nodes if n.target is torch._assert]
    needed: set[fx.Node] = set()
    while roots:
        m = roots.pop()
        if m not in needed:
            needed.add(m)
            if m not in provided:
                roots.extend(m.all_input_nodes)
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in graph.nodes:
        if n.op == "placeholder":
            env[n] = new.node_copy(n, lambda a: env[a])
    args: list[Any] = []
    for s in prog.sources:
        args.append(env[by_name[s.placeholder]] if s.placeholder else
                    new.get_attr(s.param))
    args += [c.attr if c.attr is not None else env[by_name[c.text]] for c in prog.attrs]
    call = new.create_node("call_function", launcher, tuple(args), name="rowfused")
    for i, n in enumerate(provided):
        env[n] = new.create_node("call_function", operator.getitem, (call, i), name=n.name)
    for n in graph.nodes:
        if n in needed and n not in env:
            env[n] = new.node_copy(n, lambda a: env[a])
    return new

