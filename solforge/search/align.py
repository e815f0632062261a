"""Differential tracing: a reference traced on each of its visible workloads
(``trace.trace_workload``) into one graph valid for all of them (:func:`trace_reference`),
the graphs compared node for node and each node's arguments merged.

What merges: equal values; tagged attribute numbers (``tagged.py``) that are the same
attribute, or the same expression of attributes, in every workload (:class:`AttrRef`);
a number that differs between workloads but equals one int/float attribute of the module
tree in each of them (that attribute, the shortest name first). Anything else is a
:class:`TraceError` naming the node.

Not covered: a constant computed from sizes or several attributes that no single
attribute holds (``self.a * self.b`` untagged, a size read into Python arithmetic): it
fails the trace with that reason.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import torch.fx as fx
import torch.nn as nn

from solforge.problems.spec import Problem, Workload
from solforge.search.tagged import TaggedFloat, TaggedInt, attribute_source, plain
from solforge.search.trace import (
    AttrRef,
    BuildError,
    TracedReference,
    TraceError,
    trace_workload,
)


def scalar_attributes(model: nn.Module) -> dict[str, Any]:
    """Every int/float attribute of the module tree, by qualified name."""
    out: dict[str, Any] = {}
    for prefix, mod in model.named_modules():
        for k, v in vars(mod).items():
            if k.startswith("_") or k == "training" or isinstance(v, bool):
                continue
            if isinstance(v, (int, float)):
                out[f"{prefix}.{k}" if prefix else k] = plain(v)
    return out


def _same(a: Any, b: Any) -> bool:
    a, b = plain(a), plain(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


class Aligner:
    """Compares one node's arguments across workloads; maps differing constants."""

    def __init__(self, attrs: list[dict[str, Any]]) -> None:
        self.attrs = attrs

    def attribute_for(self, values: list[Any]) -> str | None:
        names = [k for k in self.attrs[0]
                 if all(k in a and _same(a[k], v) for a, v in zip(self.attrs, values))]
        if not names:
            return None
        # the shortest name: an attribute of the root before one of a submodule
        return min(names, key=lambda n: (n.count("."), len(n)))

    def merge(self, items: list[Any], where: str) -> Any:
        first = items[0]
        if isinstance(first, fx.Node):
            if not all(isinstance(x, fx.Node) and x.name == first.name for x in items):
                raise TraceError(f"{where}: the graph's data flow differs between workloads")
            return first
        if isinstance(first, (tuple, list)):
            if not all(type(x) is type(first) and len(x) == len(first) for x in items):
                raise TraceError(f"{where}: an argument's length differs between workloads "
                                 "(Python branches on sizes or attributes)")
            merged = [self.merge([x[i] for x in items], where) for i in range(len(first))]
            return type(first)(merged)
        if isinstance(first, dict):
            if not all(isinstance(x, dict) and x.keys() == first.keys() for x in items):
                raise TraceError(f"{where}: keyword arguments differ between workloads")
            return {k: self.merge([x[k] for x in items], where) for k in first}
        if isinstance(first, slice):
            parts = [self.merge([getattr(x, p) for x in items], where)
                     for p in ("start", "stop", "step")]
            return slice(*parts)
        if isinstance(first, (TaggedInt, TaggedFloat)) and \
                first.source != attribute_source(first.attr) and \
                all(getattr(x, "source", None) == first.source for x in items):
            return AttrRef(first.attr, plain(first), first.source)  # an expression
        if isinstance(first, (TaggedInt, TaggedFloat)) and \
                all(getattr(x, "attr", None) == first.attr for x in items):
            return AttrRef(first.attr, plain(first))
        if all(_same(x, first) for x in items):
            return plain(first)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            # computed in Python from attributes: one attribute may still hold it
            name = self.attribute_for(items)
            if name is not None:
                return AttrRef(name, plain(first))
        raise TraceError(f"{where}: the constant {first!r} differs between workloads "
                         f"({items!r}) and is no attribute of the module")


def trace_reference(problem: Problem, module: ModuleType,
                    workloads: list[Workload] | None = None) -> TracedReference:
    """Trace ``module.Model`` on each of ``workloads`` (default: the visible ones) and
    return one graph valid for all of them (see the module docstring)."""
    ws = workloads if workloads is not None else problem.visible_workloads()
    if not ws:
        raise TraceError("the problem has no visible workload to trace")
    # the mode the evaluator runs the model in (plain KernelBench files keep train mode)
    train = problem.train_mode or problem.kernelbench_plain
    traced, used, skipped = [], [], []
    for w in ws:
        try:
            traced.append(trace_workload(module, w, train,
                                         specialise=len(problem.workloads) == 1))
            used.append(w)
        except BuildError as e:
            # a big workload whose inputs need real values: the others still vouch for the
            # graph, and the verdict runs this one
            skipped.append(str(e))
    if not traced:
        raise TraceError(skipped[0] if skipped else "no visible workload to trace")
    ws = used
    graphs = [g for g, _ in traced]
    first = graphs[0]
    nodes = [list(g.nodes) for g in graphs]
    for g, w in zip(nodes[1:], ws[1:]):
        if len(g) != len(nodes[0]):
            raise TraceError(f"the traced graph of workload {w.name} has {len(g)} nodes and "
                             f"that of {ws[0].name} {len(nodes[0])} (Python branches on "
                             "sizes or attributes)")
    aligner = Aligner([scalar_attributes(m) for _, m in traced])
    for i, node in enumerate(nodes[0]):
        others = [g[i] for g in nodes]
        where = f"node {node.name}"
        for o in others[1:]:
            if o.op != node.op or o.target != node.target or o.name != node.name:
                raise TraceError(f"{where}: the traced graphs differ between workloads "
                                 f"({node.format_node()} vs {o.format_node()})")
        node.args = aligner.merge([o.args for o in others], where)
        node.kwargs = aligner.merge([o.kwargs for o in others], where)
    return TracedReference(graph=first, module=traced[0][1], workloads=[w.name for w in ws],
                           skipped=skipped)
