"""Candidates and the registry of generators that propose them.

A **generator** looks at a problem (its reference module, its traced graph and the
library patterns found in it, its precision class, the device) and yields
:class:`Candidate` s: a name, the levers it pulls (from :data:`LEVERS`), an estimated cost
and the full source of a solution file defining ``ModelNew``. Built-in generators
(``families/``, named here by import path and imported when candidates are generated)
and plug-ins go through the same door: :func:`register_generator`, or a package exposing
the ``solforge.search_generators`` entry point whose object is a
``(context) -> Iterable[Candidate]`` callable.

The cost is an estimate in seconds of what evaluating the candidate takes (compilation
included); the search orders candidates by it. It is a guess per family, not a
measurement.

Not covered: generators that need a GPU to *generate* (they all write source here; the
device only decides which families apply).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import ModuleType

from pydantic import BaseModel, Field, field_validator

from solforge.problems.loader import import_file
from solforge.problems.spec import Problem
from solforge.registry import lookup
from solforge.search.align import trace_reference
from solforge.search.match import Match, find_matches
from solforge.search.trace import TracedReference, TraceError, preload_compiler

# The fixed lever vocabulary: what a kept solution says it used, so a summary can
# attribute the gain.
LEVERS = ("compile", "compile_max_autotune", "cuda_graphs", "tf32", "lowp_tensor_cores",
          "cudnn_benchmark", "inductor_tuning", "freezing", "blas_choice",
          "channels_last", "library_kernel", "fusion", "sdpa", "autotune")


class Candidate(BaseModel):
    """One solution the search will evaluate."""

    name: str = Field(description="unique within a problem: 'compile', 'library', ...")
    family: str = Field(description="the generator that proposed it")
    levers: list[str] = Field(default_factory=list, description="from LEVERS")
    cost: float = Field(description="estimated seconds to evaluate it, compile included")
    compile_s: float = Field(0.0, ge=0, description="the part of ``cost`` that is one "
                             "torch.compile of the forward (0: none, or one whose time no "
                             "other compile predicts: max-autotune, Inductor options); "
                             "replaced by what this problem's compiles took once one was "
                             "measured (``budget.estimated_seconds``)")
    source: str = Field(description="the solution file: defines ModelNew")
    reasoning: str = Field(description="why this candidate could be faster")
    parent: str | None = Field(None, description="the candidate this one was derived from")
    language: str = "pytorch"
    calls_reference: bool = Field(
        False, description="imports and runs the problem file itself (a plug-in's choice; "
        "the built-in families copy the code instead): flagged by the evaluator, rejected "
        "under its strict policy")

    @field_validator("levers")
    @classmethod
    def _known_levers(cls, v: list[str]) -> list[str]:
        unknown = [x for x in v if x not in LEVERS]
        if unknown:
            raise ValueError(f"unknown levers {unknown}; use {', '.join(LEVERS)}")
        return v


@dataclass
class SearchContext:
    """What generators look at. Built once per problem by :func:`search_context`."""

    problem: Problem
    device: str
    module: ModuleType
    # the torch.compile mode of the evaluator's compile baseline (``EvalOptions.compile_mode``):
    # the ``compile`` candidate is compiled the same way, so it is that baseline as a solution
    compile_mode: str = "default"
    traced: TracedReference | None = None
    trace_error: str | None = None
    matches: list[Match] = field(default_factory=list)
    # matches of ``variant`` patterns: candidates of their own on top of ``matches``
    variant_matches: list[Match] = field(default_factory=list)
    pattern_errors: list[str] = field(default_factory=list)
    # matched patterns that gave no candidate, and why (the generators append)
    rewrite_errors: list[str] = field(default_factory=list)
    # families that looked at the problem and offered nothing, and why (the generators
    # append; the search logs them)
    declined: list[str] = field(default_factory=list)

    @property
    def gpu(self) -> bool:
        return self.device.startswith("cuda")


Generator = Callable[[SearchContext], Iterable[Candidate]]
# the built-in families (``families/``), by import path; plug-ins add rows
_GENERATORS: dict[str, str | Generator] = {
    **{name: f"solforge.search.families.generic:{name}_family"
       for name in ("reference", "compile", "cuda_graphs", "tf32")},
    "conv": "solforge.search.families.conv:conv_family",
    "library": "solforge.search.families.library:library_family",
    "inductor": "solforge.search.families.inductor:inductor_family",
    "rowfuse": "solforge.search.families.rowfuse:rowfuse_family",
}
_PLUGINS_LOADED = False


def register_generator(name: str, fn: str | Generator) -> None:
    """Add (or replace) a generator: the callable, or its ``"module:attr"`` import path
    (imported when candidates are generated). The built-ins are rows of the same table."""
    _GENERATORS[name] = fn


def _load_plugins() -> None:
    global _PLUGINS_LOADED
    if not _PLUGINS_LOADED:
        _PLUGINS_LOADED = True
        for ep in entry_points(group="solforge.search_generators"):
            try:
                register_generator(ep.name, ep.load())
            except Exception as e:  # a broken plug-in must not hide the built-ins
                print(f"solforge: ignoring search generator {ep.name!r}: {e}", file=sys.stderr)


def generators() -> dict[str, Generator]:
    """Every registered generator (entry-point plug-ins included), by name, imported."""
    _load_plugins()
    return {name: lookup(_GENERATORS, name, "search generator") for name in list(_GENERATORS)}


def search_context(problem: Problem, device: str, compile_mode: str = "default"
                   ) -> SearchContext:
    """Import the reference, trace it (see ``trace.py``) and find library patterns. A
    reference that cannot be traced, or a pattern that fails, costs only the graph
    rewrites (``trace_error``, ``pattern_errors``). ``compile_mode``: the compile
    baseline's mode (the ``compile`` candidate's)."""
    preload_compiler()  # before any thread traces: see its docstring
    module = import_file(problem.path, prefix="solforge_search_reference")
    ctx = SearchContext(problem=problem, device=device, module=module,
                        compile_mode=compile_mode)
    try:
        ctx.traced = trace_reference(problem, module)
    except TraceError as e:
        ctx.trace_error = str(e)
    except Exception as e:  # a tracer bug must cost the rewrites, not the search
        ctx.trace_error = f"tracing failed: {type(e).__name__}: {e}"
    if ctx.traced is not None:
        ctx.matches = find_matches(ctx.traced, errors=ctx.pattern_errors, gpu=ctx.gpu)
        ctx.variant_matches = find_matches(ctx.traced, errors=ctx.pattern_errors,
                                           gpu=ctx.gpu, variants=True)
    return ctx


def generate_candidates(ctx: SearchContext, families: list[str] | None = None
                        ) -> tuple[list[Candidate], dict[str, str]]:
    """Every candidate of the selected families (all by default), cheapest first with each
    parent before the candidates derived from it; and the error of each generator that
    raised (name: message) instead of stopping the others."""
    out: list[Candidate] = []
    errors: dict[str, str] = {}
    _load_plugins()
    for name in list(_GENERATORS):
        if families is not None and name not in families:
            continue
        try:
            out += list(lookup(_GENERATORS, name, "search generator")(ctx))
        except Exception as e:
            errors[name] = f"{type(e).__name__}: {e}"
    seen: set[str] = set()
    unique = []
    for c in out:
        if c.name not in seen:
            seen.add(c.name)
            unique.append(c)
    return order_candidates(unique), errors


def order_candidates(cands: list[Candidate],
                     key: Callable[[Candidate], tuple] | None = None) -> list[Candidate]:
    """By ``key`` (default: estimated cost, then name), a parent always before its
    children."""
    key = key or (lambda c: (c.cost, c.name))
    by_name = {c.name: c for c in cands}
    placed: list[Candidate] = []
    done: set[str] = set()

    def place(c: Candidate) -> None:
        if c.name in done:
            return
        if c.parent in by_name:
            place(by_name[c.parent])
        done.add(c.name)
        placed.append(c)

    for c in sorted(cands, key=key):
        place(c)
    return placed
