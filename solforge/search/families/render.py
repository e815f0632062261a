"""How a family's choice becomes a :class:`~solforge.search.candidates.Candidate`: a
:class:`Wrap` around the reference's forward, or a rewritten graph, rendered as a
solution file (``emit.py`` writes the text); and :data:`COST`, the estimates the
families give their candidates.

Every file stands alone (``emit.py``): a rewritten graph's with the reference's
constructor copied and the graph as ``forward``; the others with the reference's
``Model`` copied whole and a ``ModelNew`` subclass wrapping its ``forward``. Either way
the constructor and the parameter names are the reference's.

Not covered: which candidates a problem gets (the families decide: ``generic.py``,
``conv.py``, ``library.py``, ``inductor.py``); whether a file runs or is fast (the
evaluator's); costs as measurements (they are guesses that only order the search, until
``budget.estimated_seconds`` replaces a plain-mode compile's with what one took).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch.fx as fx

from solforge.search.candidates import Candidate, SearchContext
from solforge.search.emit import (
    BASE_IMPORTS,
    copied_names,
    forward_signature,
    standalone_file,
    subclass_file,
)
from solforge.search.fxsource import forward_source
from solforge.search.match import LIBRARY_MODULE, LibraryFunction

# estimated seconds per evaluation (compile included): they only order the search
COST = {"reference": 1.0, "flags": 1.5, "channels_last": 2.0, "sdpa": 1.5,
        "library": 2.0, "library_fn": 1.5, "graphs": 5.0, "compile_cpu": 15.0,
        "compile_gpu": 40.0, "max_autotune": 240.0}


@dataclass
class Wrap:
    """How a candidate's forward is run: decorators around it, inputs converted in it."""

    compile_mode: str | None = None
    # TorchInductor options instead of a mode (torch.compile takes one or the other)
    compile_options: tuple[tuple[str, Any], ...] = ()
    cuda_graphs: bool = False
    tf32: bool = False
    cudnn_benchmark: bool = False
    blas: str | None = None  # preferred BLAS library during the forward
    channels_last: bool = False  # 4-D weights and inputs in NHWC order
    channels_last_3d: bool = False  # 5-D weights and inputs in NDHWC order

    def empty(self) -> bool:
        return self == Wrap()

    def decorators(self) -> tuple[list[str], list[str]]:
        """Decorator lines, outermost first, and the imports they need."""
        decos, imports = [], []
        flags = [f for f, on in (("tf32=True", self.tf32),
                                 ("cudnn_benchmark=True", self.cudnn_benchmark),
                                 (f"blas={self.blas!r}", self.blas is not None)) if on]
        if flags:
            decos.append(f"backend_flags({', '.join(flags)})")
            imports.append("from solforge.search.runtime import backend_flags")
        if self.cuda_graphs:
            decos.append("cuda_graphed")
            imports.append("from solforge.search.runtime import cuda_graphed")
        if self.compile_options:
            decos.append(f"torch.compile(options={dict(self.compile_options)!r})")
        elif self.compile_mode is not None:
            decos.append(f"torch.compile(mode={self.compile_mode!r})")
        return decos, imports


def _inputs_of_rank(ctx: SearchContext, rank: int) -> list[str] | None:
    """Names of forward's inputs that are tensors of ``rank`` dims (None: unknown,
    untraced)."""
    if ctx.traced is None:
        return None
    return [str(n.target) for n in ctx.traced.graph.nodes if n.op == "placeholder"
            and getattr(n.meta.get("val"), "ndim", 0) == rank]


def _subclass_body(ctx: SearchContext, wrap: Wrap) -> tuple[str, list[str]]:
    """``ModelNew(Reference)``'s body: the reference's forward, wrapped."""
    if wrap.empty():
        return ('"""The reference, unchanged: the floor every other candidate must beat."""',
                [])
    params, call_args = forward_signature(ctx.module.Model)
    decos, imports = wrap.decorators()
    lines = []
    if wrap.channels_last or wrap.channels_last_3d:
        lines += ["def __init__(self, *args, **kwargs):",
                  "    super().__init__(*args, **kwargs)"]
    if wrap.channels_last:
        lines += ["    # conv weights in NHWC order; the state-dict copy keeps their layout",
                  "    self.to(memory_format=torch.channels_last)"]
    if wrap.channels_last_3d:
        imports.append("from solforge.search.runtime import channels_last_3d_weights")
        lines += ["    # 3-D conv weights in NDHWC order; the state-dict copy keeps their layout",
                  "    channels_last_3d_weights(self)"]
    if wrap.channels_last or wrap.channels_last_3d:
        lines.append("")
    lines += [f"@{d}" for d in decos]
    lines.append(f"def forward({params}):")
    names = [a.strip() for a in call_args.split(",") if a.strip()]
    for on, rank, fn in ((wrap.channels_last, 4, "channels_last"),
                         (wrap.channels_last_3d, 5, "channels_last_3d")):
        if not on:
            continue
        imports.append(f"from solforge.search.runtime import {fn}")
        ranked = _inputs_of_rank(ctx, rank)
        for name in names if ranked is None else [n for n in names if n in ranked]:
            lines.append(f"    {name} = {fn}({name})")
    lines.append(f"    return super().forward({call_args})")
    return "\n".join(lines), imports


def make_candidate(ctx: SearchContext, *, name: str, family: str, summary: str,
                   details: list[str], levers: list[str], cost: float, reasoning: str,
                   wrap: Wrap | None = None, graph: fx.Graph | None = None,
                   calls: tuple[Any, ...] = (), parent: str | None = None,
                   compile_part: float | None = None) -> Candidate:
    """Render one candidate's solution file (``emit.py``): a rewritten ``graph`` makes a
    standalone file; no graph, a subclass of the reference around its own forward.
    ``compile_part``: the share of ``cost`` that is one plain compile (estimated from the
    problem's measured compiles, ``budget.estimated_seconds``); by default the whole
    compile cost of a plain-mode compile, none for anything else."""
    wrap = wrap or Wrap()
    imports = list(BASE_IMPORTS)
    # a compile in a plain mode: its time is what the problem's other such compiles took
    plain = wrap.compile_mode is not None and not wrap.compile_options and \
        not wrap.compile_mode.startswith("max-autotune")
    compile_s = min(cost, COST["compile_gpu" if ctx.gpu else "compile_cpu"]) if plain else 0.0
    if compile_part is not None:
        compile_s = min(cost, compile_part)
    if graph is None:
        body, extra = _subclass_body(ctx, wrap)
        source = subclass_file(problem=ctx.problem.name, candidate=name, summary=summary,
                               details=details, levers=levers,
                               reference_path=ctx.problem.path, imports=imports + extra,
                               body=body)
        return Candidate(name=name, family=family, levers=levers, cost=cost, source=source,
                         reasoning=reasoning, parent=parent, compile_s=compile_s)
    taken = copied_names(ctx.problem.path)
    names = {}
    for c in calls:
        if isinstance(c, LibraryFunction):
            names[c] = c.name if c.name not in taken else f"{c.name}_kernel"
            imports.append(f"from {c.module} import {c.name}" +
                           (f" as {names[c]}" if names[c] != c.name else ""))
    forward = forward_source(graph, names)
    decos, extra = wrap.decorators()
    opaque = sorted(n for c, n in names.items() if c.module == LIBRARY_MODULE)
    prelude = []
    if opaque and (wrap.compile_mode is not None or wrap.compile_options):
        # Dynamo does not trace the library's launch code (autotuners with pruning, shape
        # heuristics, fallbacks): each call is a graph break, run as it is, and Inductor
        # compiles the graph between them
        prelude = ["# compiled around, not through: each library call runs as it is (a graph",
                   "# break) and TorchInductor fuses the work between them",
                   *(f"{n} = torch.compiler.disable({n})" for n in opaque)]
    if "F." in forward:
        imports.append("import torch.nn.functional as F")
    if re.search(r"\bmath\.", forward):
        imports.append("import math")
    source = standalone_file(problem=ctx.problem.name, candidate=name, summary=summary,
                             details=details, levers=levers, reference_path=ctx.problem.path,
                             imports=imports + extra, forward=forward, decorators=decos,
                             prelude=prelude)
    return Candidate(name=name, family=family, levers=levers, cost=cost, source=source,
                     reasoning=reasoning, parent=parent, compile_s=compile_s,
                     language="triton" if any(c.module == LIBRARY_MODULE for c in names)
                     else "pytorch")
