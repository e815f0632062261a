"""Tracing a reference into a torch.fx graph whose nodes carry example values.

How: ``torch.fx`` symbolic tracing, with a tracer that also runs every recorded operation
on **meta** tensors (a workload's inputs and the model built on the meta device, so a
prefill-sized workload costs nothing). Every node keeps its example value in
``node.meta["val"]``. Shapes stay symbolic in the graph (``x.shape[-1]`` is a node);
dtypes are concrete: ``torch.finfo(x.dtype)`` and ``.to(query.dtype)`` see the real dtype
(HF's eager attention traces), and the matcher can check each pattern's dtype handling.
Iterating a shape (``b, s, _ = x.shape``) unrolls to the tensor's rank.

Numbers the forward reads from its module (``self.eps``, ``self.scaling``,
``self.top_k``: every int and float attribute of the module tree) are tagged before the
trace, so a constant that came straight from an attribute is emitted as that attribute
(:class:`AttrRef`, printed ``self.top_k``), not as its value. Integer arithmetic (``+``,
``-``, ``*``, ``//``) on tagged ints keeps a tag too, with its expression:
``n_rep = self.heads // self.kv_heads`` is emitted as ``(self.heads // self.kv_heads)``.

What is still baked in at trace time (dtypes, ranks, numbers *computed* from attributes or
sizes in Python, branches on them) is checked by **differential tracing**: the reference
is traced once per visible workload (the workloads an agent sees) and the graphs must
agree node for node. A constant that differs between workloads must be the same
attribute expression in every workload, or equal one numeric attribute in every workload,
and becomes it; anything else fails the trace with the reason.

Why not ``torch.export`` or a dynamo graph: both capture for given shapes (specialised or
guarded symbols) and lift parameters into graph inputs; the emitted solution must stay one
readable ``forward`` over the reference's own submodules and parameter names, for every
shape. The price is fx's limits.

Not covered: Python control flow on tensor values or symbolic sizes (``if x.shape[0] > 1``,
loops over a tensor, ``min(k, x.size(-1))``), data-dependent operations (``.item()``,
``.tolist()``), item assignment into a traced tensor, tensors created at trace time as
constants, and held-out workloads (never read: the verdict judges them).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn

from solforge.problems import gen
from solforge.problems.spec import Problem, Workload, call_with_params
from solforge.search.tagged import (
    TaggedFloat,
    TaggedInt,
    attribute_source,
    plain,
    tag_attributes,
)


class TraceError(RuntimeError):
    """The reference cannot be traced into one graph valid for its workloads."""


@dataclass(frozen=True)
class AttrRef:
    """A constant that is really ``self.<name>`` of the reference module, or an integer
    expression of such attributes (``source``, e.g. ``(self.heads // self.kv_heads)``;
    ``name`` is then the expression without its ``self.`` prefixes' first one)."""

    name: str
    value: Any
    source: str = ""

    def __repr__(self) -> str:
        return self.source or attribute_source(self.name)


@dataclass
class TracedReference:
    """The reference's graph (of the first traced workload) with example values."""

    graph: fx.Graph
    module: nn.Module = field(repr=False)   # built on the meta device, first workload
    workloads: list[str]                    # the workloads whose graphs agreed
    skipped: list[str] = field(default_factory=list)  # workloads that could not be built


def _meta_values(args: Any) -> Any:
    return fx.node.map_aggregate(args, lambda a: a.meta.get("val") if isinstance(a, fx.Node)
                                 else a)


class _ValueProxy(fx.Proxy):
    """A proxy whose dtype is its example value's, and whose shape iterates by rank."""

    @property
    def dtype(self) -> Any:  # type: ignore[override]
        val = self.node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.dtype
        return self.tracer.create_proxy("call_function", getattr, (self, "dtype"), {})

    def __getattr__(self, k: str) -> Any:
        return _ValueAttribute(self, k)

    def __iter__(self):  # type: ignore[override]
        val = self.node.meta.get("val")
        if isinstance(val, (tuple, list, torch.Size)):
            return iter([self[i] for i in range(len(val))])
        return super().__iter__()

    def __len__(self) -> int:
        val = self.node.meta.get("val")
        if isinstance(val, (tuple, list, torch.Size)):
            return len(val)
        raise TraceError("len() of a traced value that is not a shape or a tuple")


class _ValueAttribute(fx.proxy.Attribute, _ValueProxy):
    pass


class _ValueTracer(fx.Tracer):
    """fx's tracer, computing each node's example value on the meta device."""

    def __init__(self, root: nn.Module, inputs: list[Any]) -> None:
        super().__init__()
        self.proxy_buffer_attributes = True  # buffers become get_attr nodes, as parameters
        self._root = root
        self._inputs = list(inputs)
        self._placeholder = 0
        self._evaluating = False

    # while a node's value is computed, modules are plain modules again: fx patches
    # attribute access and calls of every nn.Module for the duration of the trace
    def getattr(self, attr: str, attr_val: Any, parameter_proxy_cache: dict) -> Any:
        if self._evaluating:
            return attr_val
        return super().getattr(attr, attr_val, parameter_proxy_cache)

    def call_module(self, m: nn.Module, forward: Any, args: Any, kwargs: Any) -> Any:
        if self._evaluating:
            return forward(*args, **kwargs)
        return super().call_module(m, forward, args, kwargs)

    def proxy(self, node: fx.Node) -> fx.Proxy:
        return _ValueProxy(node, self)

    def create_proxy(self, kind, target, args, kwargs, name=None, type_expr=None,
                     proxy_factory_fn=None):
        rv = super().create_proxy(kind, target, args, kwargs, name, type_expr,
                                  proxy_factory_fn)
        node = rv.node
        if kind == "placeholder":
            if self._placeholder >= len(self._inputs):
                raise TraceError(f"forward takes more inputs than get_inputs() returns "
                                 f"({target!r} has no input)")
            node.meta["val"] = self._inputs[self._placeholder]
            self._placeholder += 1
            return rv
        if kind == "output":
            return rv
        self._evaluating = True
        try:
            node.meta["val"] = self._evaluate(node)
        except TraceError:
            raise
        except Exception as e:
            raise TraceError(f"cannot evaluate {node.format_node()} on meta tensors: "
                             f"{type(e).__name__}: {e}") from None
        finally:
            self._evaluating = False
        return rv

    def _evaluate(self, node: fx.Node) -> Any:
        args, kwargs = _meta_values(node.args), _meta_values(node.kwargs)
        if node.op == "get_attr":
            obj: Any = self._root
            for atom in str(node.target).split("."):
                obj = getattr(obj, atom)
            return obj
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        if node.op == "call_module":
            mod = self._root.get_submodule(str(node.target))
            node.meta["module"] = mod  # the matcher reads its type and settings
            if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.training and \
                    mod.momentum is None and len(args) == 1 and not kwargs:
                # its cumulative average reads num_batches_tracked on the host, which a
                # meta tensor cannot give; the value is the same without the update
                return nn.functional.batch_norm(args[0], None, None, mod.weight, mod.bias,
                                                True, 0.0, mod.eps)
            return mod(*args, **kwargs)
        raise TraceError(f"unexpected node kind {node.op}")


def _meta_inputs(module: ModuleType, w: Workload) -> list[Any]:
    params = dict(w.params)
    with gen.distribution("normal"), torch.device("meta"):
        inputs = call_with_params(module.get_inputs, params)
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    return [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]


def _meta_model(module: ModuleType, w: Workload, train_mode: bool) -> nn.Module:
    args = call_with_params(module.get_init_inputs, dict(w.params))
    args = list(args) if isinstance(args, (list, tuple)) else [args]
    with torch.device("meta"):
        model = module.Model(*args)
    if not isinstance(model, nn.Module):
        raise TraceError("the reference Model is not an nn.Module")
    return model.train(train_mode)


class BuildError(TraceError):
    """A workload's model or inputs cannot be built for tracing."""


def _build(module: ModuleType, w: Workload, train_mode: bool) -> tuple[nn.Module, list[Any]]:
    """The model and inputs on the meta device; a small (``cpu``) workload whose
    construction reads values (``.tolist()``) is built on the CPU and moved to meta."""
    try:
        return _meta_model(module, w, train_mode), _meta_inputs(module, w)
    except Exception as e:
        if not w.cpu:
            raise BuildError(f"workload {w.name}: building the model or inputs on the meta "
                             f"device failed: {type(e).__name__}: {e}") from None
    try:
        args = call_with_params(module.get_init_inputs, dict(w.params))
        model = module.Model(*(list(args) if isinstance(args, (list, tuple)) else [args]))
        with gen.distribution("normal"):
            inputs = call_with_params(module.get_inputs, dict(w.params))
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        return (model.to("meta").train(train_mode),
                [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs])
    except Exception as e:
        raise BuildError(f"workload {w.name}: building the model or inputs failed: "
                         f"{type(e).__name__}: {e}") from None


# torch.fx's tracer keeps process-wide state (its patcher, the wrapped functions) and
# building on the meta device sets global defaults: two threads tracing at once broke
# each other's traces ("CURRENT_PATCHER is None in finally block", values lost). The
# planner's workers are threads of one process, so tracing is one at a time.
_TRACE_LOCK = threading.Lock()
_PRELOAD_LOCK = threading.Lock()
_preloaded = False
# what tracing on meta tensors and the candidate families import lazily (PyTorch 2.11 and
# 2.13: nothing more of torch is imported by a search once these are)
COMPILER_MODULES = ("torch._dynamo", "torch._inductor.utils", "torch._inductor.config")


def preload_compiler() -> None:
    """Import PyTorch's compiler stack once, whole, under a lock, before any search thread
    needs it. Tracing a reference on meta tensors imports ``torch._dynamo`` and
    ``torch._inductor.utils`` on first use; two planner workers (threads) doing that at once
    see a partially initialised module (``'torch._dynamo' has no attribute 'utils'``,
    ``cannot import name 'IndentedBuffer'``): on an H100 with torch 2.11, every trace of a
    three-worker KernelBench run failed so and no library pattern was tried
    (benchmarks/results/2026-12-06-h100-s19). About 2 s, once per process."""
    global _preloaded
    if _preloaded:
        return
    with _PRELOAD_LOCK:
        if not _preloaded:
            import importlib

            for name in COMPILER_MODULES:
                try:
                    importlib.import_module(name)
                except ImportError:  # a build without the compiler: nothing to race on
                    pass
            _preloaded = True


def trace_workload(module: ModuleType, w: Workload, train_mode: bool = False
                   ) -> tuple[fx.Graph, nn.Module]:
    """One workload's graph with example values, and the meta model it was traced on."""
    with _TRACE_LOCK:
        return _trace_workload(module, w, train_mode)


def _trace_workload(module: ModuleType, w: Workload, train_mode: bool
                    ) -> tuple[fx.Graph, nn.Module]:
    model, inputs = _build(module, w, train_mode)
    tag_attributes(model)
    tracer = _ValueTracer(model, inputs)
    try:
        graph = tracer.trace(model)
    except TraceError as e:
        raise TraceError(f"workload {w.name}: {e}") from None
    except Exception as e:  # fx's own TraceError, TypeError from a proxy, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TraceError(f"workload {w.name}: torch.fx cannot trace the reference: "
                         f"{type(e).__name__}: {first}") from None
    return graph, model


def _scalar_attributes(model: nn.Module) -> dict[str, Any]:
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


class _Aligner:
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
            traced.append(trace_workload(module, w, train))
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
    aligner = _Aligner([_scalar_attributes(m) for _, m in traced])
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
