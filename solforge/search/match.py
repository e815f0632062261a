"""Finding library-kernel patterns in a traced reference and substituting them.

A :class:`Pattern` looks at a :class:`~solforge.search.trace.TracedReference` and returns
:class:`Match` es: the nodes a pattern covers, the nodes whose values leave it, and how to
build the replacement (a call of a library function, or of
``F.scaled_dot_product_attention``). Each pattern checks what makes the substitution exact
on its own terms, from the nodes' example values: dims, ``keepdim``, which casts happen
where (HF's RMSNorm rounds to the input dtype before the weight multiply, Gemma's does
not), broadcast shapes, dtypes of every input and output.

:func:`find_matches` runs the registered patterns in order (fused patterns first: residual
add + RMSNorm before RMSNorm, attention before softmax, gated units before activations); a
match overlapping an earlier one is dropped. :func:`substitute` rewrites a copy of the
graph: the replacement goes right after the last node of the match, every use of a matched
output is redirected to it, and the matched nodes (now unused) are erased with any shape
arithmetic only they needed.

Built-in patterns live in the ``patterns`` package, named here by import path
(``_PATTERNS``, ``solforge.registry``) and imported when matching starts; a plug-in adds
its own through :func:`register_pattern`, the same table. Patterns read nodes through
:mod:`solforge.search.nodes`.

Not covered: patterns spread over several graphs (a model split into modules fx keeps as
leaves is matched only where the leaf is itself a pattern: ``nn.LayerNorm``, ``nn.SiLU``,
``nn.GELU``, ``nn.Linear``, ``nn.Softmax``, ``nn.CrossEntropyLoss``,
``nn.MultiheadAttention``, ``nn.ReLU``, ``nn.BatchNorm1d/2d/3d``, ``nn.GroupNorm``,
``nn.InstanceNorm1d/2d/3d``); algebraic rewrites
(``1 / sqrt`` for ``rsqrt``, a scale folded into q); anything the example values cannot
tell (values of masks are checked by their construction, never by their contents, when
matching; the one check of contents, whether a buffer mask is causal, runs in the
generated file: ``runtime.masked_sdpa``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.fx as fx

from solforge.registry import lookup
from solforge.search.trace import TracedReference

LIBRARY_MODULE = "solforge.kernels.triton"


@dataclass(frozen=True)
class LibraryFunction:
    """A kernel-library function named, not imported: the search process never loads
    Triton; the generated file does (``from solforge.kernels.triton import <name>``)."""

    name: str
    module: str = LIBRARY_MODULE

    @property
    def __name__(self) -> str:  # fx names the node after it
        return self.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.module}.{self.name} runs in the generated solution, "
                           "not in the search process")


@dataclass
class Match:
    """One occurrence of a pattern."""

    kind: str                      # the pattern's name
    nodes: set[fx.Node]            # nodes the replacement computes (erased after)
    outputs: list[fx.Node]         # matched nodes used outside the match, in order
    build: Callable[[fx.Graph, Callable[[Any], Any]], list[fx.Node]]
    description: str               # what was found, in a kernel engineer's words
    levers: tuple[str, ...]
    optional: set[fx.Node] = field(default_factory=set)  # absorbed if only the match uses them
    calls: tuple[Any, ...] = ()    # functions the replacement calls (for imports)

    @property
    def language(self) -> str:
        return "triton" if any(isinstance(c, LibraryFunction) and c.module == LIBRARY_MODULE
                               for c in self.calls) else "pytorch"


@dataclass(frozen=True)
class Pattern:
    name: str
    find: Callable[[TracedReference], list[Match]]
    description: str
    gpu_only: bool = False  # not matched for a CPU device (a kernel that only pays on a GPU)
    # offered as a candidate of its own on top of the other patterns' rewrite, never in the
    # base one (a rewrite of the reference's own library call, which may lose to it)
    variant: bool = False


# the built-ins, in the order they are tried (fused patterns first); plug-ins add rows
_PATTERNS: dict[str, str | Pattern] = {
    "sdpa": "solforge.search.patterns.attention:SDPA_PATTERN",
    "sdpa_bias": "solforge.search.patterns.attention_bias:SDPA_BIAS_PATTERN",
    "gqa": "solforge.search.patterns.gqa:GQA_PATTERN",
    "mha_no_weights": "solforge.search.patterns.mha:MHA_PATTERN",
    "fp8_quant": "solforge.search.patterns.quant:FP8_QUANT_PATTERN",
    "lowp_gemm": "solforge.search.patterns.lowp_gemm:LOWP_GEMM_PATTERN",
    "rms_norm": "solforge.search.patterns.norms:RMS_NORM_PATTERN",
    "rope": "solforge.search.patterns.rope:ROPE_PATTERN",
    "glu": "solforge.search.patterns.pointwise:GLU_PATTERN",
    "layer_norm": "solforge.search.patterns.norms:LAYER_NORM_PATTERN",
    "group_norm": "solforge.search.patterns.row_norms:GROUP_NORM_PATTERN",
    "row_norm": "solforge.search.patterns.row_norms:ROW_NORM_PATTERN",
    "dim_norm": "solforge.search.patterns.row_norms:DIM_NORM_PATTERN",
    "batch_norm": "solforge.search.patterns.batchnorm:BATCH_NORM_PATTERN",
    "softmax_topk": "solforge.search.patterns.reductions:SOFTMAX_TOPK_PATTERN",
    "softmax": "solforge.search.patterns.pointwise:SOFTMAX_PATTERN",
    "argmax": "solforge.search.patterns.reductions:ARGMAX_PATTERN",
    "sum_dim": "solforge.search.patterns.reductions:SUM_DIM_PATTERN",
    "max_dim": "solforge.search.patterns.reductions:MAX_DIM_PATTERN",
    "cross_entropy": "solforge.search.patterns.losses:CROSS_ENTROPY_PATTERN",
    "depthwise_conv": "solforge.search.patterns.conv:DEPTHWISE_CONV_PATTERN",
    "cumulative": "solforge.search.patterns.scan:CUMULATIVE_PATTERN",
    "f32x3_gemm": "solforge.search.patterns.gemm_f32x3:F32X3_GEMM_PATTERN",
    "bias_act": "solforge.search.patterns.pointwise:BIAS_ACT_PATTERN",
}


def register_pattern(pattern: Pattern | str, before: str | None = None,
                     name: str | None = None) -> None:
    """Add (or replace) a pattern: a :class:`Pattern`, or the ``"module:attr"`` import path
    of one registered as ``name`` (imported when matching starts); ``before`` runs it ahead
    of another. The built-ins are rows of the same table."""
    global _PATTERNS
    key = pattern.name if isinstance(pattern, Pattern) else name
    if not key:
        raise ValueError(f"register_pattern({pattern!r}) needs name=... for an import path")
    rows = [(n, p) for n, p in _PATTERNS.items() if n != key]
    names = [n for n, _ in rows]
    rows.insert(names.index(before) if before in names else len(rows), (key, pattern))
    _PATTERNS = dict(rows)


# -- finding and substituting -----------------------------------------------------------
def _closed(m: Match) -> bool:
    """Every matched value that is not an output is used only inside the match; optional
    nodes that escape are left in the graph instead."""
    escaping = {n for n in m.optional if any(u not in m.nodes | m.optional for u in n.users)}
    m.optional -= escaping
    while True:  # an optional node only feeding an escaping one escapes too
        more = {n for n in m.optional if any(u in escaping for u in n.users)}
        if not more:
            break
        escaping |= more
        m.optional -= more
    inside = m.nodes | m.optional
    return all(u in inside for n in m.nodes if n not in m.outputs for u in n.users)


def find_matches(traced: TracedReference, kinds: set[str] | None = None,
                 errors: list[str] | None = None, gpu: bool = True,
                 variants: bool = False) -> list[Match]:
    """Every non-overlapping match of the registered patterns (``kinds`` filters them;
    ``gpu`` False skips the ``gpu_only`` ones; ``variants`` picks the ``variant`` patterns
    instead of the others). A pattern that raises is skipped, its error appended to
    ``errors``."""
    taken: set[fx.Node] = set()
    found: list[Match] = []
    for name in list(_PATTERNS):
        try:
            pattern = lookup(_PATTERNS, name, "search pattern")
            if (pattern.gpu_only and not gpu) or pattern.variant != variants:
                continue
            matches = pattern.find(traced)
        except Exception as e:  # one broken pattern (a plug-in's) must not hide the others
            if errors is not None:
                errors.append(f"pattern {name}: {type(e).__name__}: {e}")
            continue
        for m in matches:
            if kinds is not None and m.kind not in kinds:
                continue
            if (m.nodes | m.optional) & taken or not _closed(m):
                continue
            taken |= m.nodes | m.optional
            found.append(m)
    return found


def substitute(traced: TracedReference, matches: list[Match]) -> fx.Graph:
    """A copy of the traced graph with ``matches`` replaced (see the module docstring).

    Raises ``ValueError`` when a match's outputs are used before its last node, where the
    replacement would have to go.
    """
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    out = graph.graph_copy(traced.graph, env)
    graph.output(out)
    order = {n: i for i, n in enumerate(traced.graph.nodes)}

    def mapped(a: Any) -> Any:
        return fx.node.map_arg(a, lambda n: env[n])

    for m in matches:
        last = max(m.nodes | m.optional, key=order.__getitem__)
        for o in m.outputs:
            for u in o.users:
                if u not in m.nodes | m.optional and order[u] < order[last]:
                    raise ValueError(f"{m.kind}: {o.name} is used by {u.name} before the "
                                     "match ends")
        # before the node after the match: new nodes keep their creation order there
        with graph.inserting_before(env[last].next):
            new = m.build(graph, mapped)
        for o, n in zip(m.outputs, new):
            env[o].replace_all_uses_with(n)
            env[o] = n  # later matches that read this value read the replacement
    _erase_dead(graph)
    graph.lint()
    return graph


def _erase_dead(graph: fx.Graph) -> None:
    """Erase nodes nothing uses, last first, except calls that may write in place and
    fx's side-effectful functions (the tracer's ``torch._assert`` guards); fx's own pass
    needs a module to judge call_module nodes, and traced leaves are pure."""
    for n in reversed(list(graph.nodes)):
        if n.op in ("placeholder", "output") or n.users:
            continue
        if n.op == "call_function" and n.is_impure():
            continue
        name = str(n.target) if n.op != "call_function" else getattr(n.target, "__name__", "")
        # (an ``out=None``, as ``torch.norm`` traces, writes nothing)
        if name.endswith("_") or n.kwargs.get("out") is not None:
            continue
        graph.erase_node(n)


def call(graph: fx.Graph, fn: Any, args: tuple, kwargs: dict | None = None,
         comment: str = "", name: str | None = None) -> fx.Node:
    """A new call node named ``name`` whose statement carries ``comment`` when printed."""
    node = graph.create_node("call_function", fn, args, kwargs or {}, name=name)
    if comment:
        node.meta["solforge_comment"] = comment
    return node


def item(graph: fx.Graph, node: fx.Node, i: int, name: str | None = None) -> fx.Node:
    return graph.create_node("call_function", operator.getitem, (node, i), {}, name=name)
