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
(:class:`AttrRef`, printed ``self.top_k``), not as its value. Arithmetic on tagged
numbers keeps a tag too, with its expression (``tagged.py``):
``n_rep = self.heads // self.kv_heads`` is emitted as ``(self.heads // self.kv_heads)``,
``1 - self.top_p`` as ``(1 - self.top_p)``.

What is still baked in at trace time (dtypes, ranks, numbers *computed* from attributes or
sizes in Python, branches on them) is checked by **differential tracing**: the reference
is traced once per visible workload (the workloads an agent sees) and the graphs must
agree node for node. A constant that differs between workloads must be the same
attribute expression in every workload, or equal one numeric attribute in every workload,
and becomes it; anything else fails the trace with the reason. This module traces one
workload (:func:`trace_workload`); ``align.trace_reference`` traces the visible ones and
compares them.

Why not ``torch.export`` or a dynamo graph: both capture for given shapes (specialised or
guarded symbols) and lift parameters into graph inputs; the emitted solution must stay one
readable ``forward`` over the reference's own submodules and parameter names, for every
shape. The price is fx's limits.

What the forward does beyond its tensors' data flow:

- Tensors it makes (``torch.tensor(self.value)``, ``torch.zeros(3)``, ``torch.randn(...)``)
  are traced as calls of the factory (``_FactoryCalls``), so the emitted forward makes
  them as the reference does; fx alone would bake each in as an anonymous constant that
  no generated file can spell.
- A parameter ``get_inputs()`` gives no value for (``h0=None``, ``mask=None``), or gives
  ``None`` for, is traced as that value (``None`` takes the reference's ``is None``
  branch), and the graph guards it: the emitted forward keeps the parameter and fails
  with a clear message when called with another value (``torch._assert``).
- A Python check of sizes or devices for equality (``assert H == self.img_size[0]``,
  ``if x.device != self.w.device: raise``) is taken as traced, and the graph guards it
  the same way. Every traced tensor is on meta, and the evaluator runs a model and its
  inputs on one device, so devices compare equal. Other branches on sizes stay fx's
  control-flow error (``if x.shape[0] > 1``).
- ``int()`` of a traced number (Swin's ``B = int(windows.shape[0] / (H * W / w / w))``)
  is taken as its value at the traced sizes, and guarded the same way, where the problem
  has one workload (KernelBench's files); with several it stays fx's error.
- Writing a traced value to module state (``self.hidden = ...``) is refused: the graph
  carries the outputs, not the state a later call would read.
- A constructor that reads values (``[x.item() for x in torch.linspace(...)]``, Swin's
  drop-path rates) cannot be built on the meta device; the model is then built with
  every factory tensor of at most ``HOST_ELEMENTS`` elements on the CPU (values to read)
  and larger ones on meta, then moved to meta (``_SmallOnHost``).

Not covered: Python control flow on tensor values or symbolic sizes other than the
equality checks above (``if x.shape[0] > 1``, loops over a tensor or over
``range(x.size(0))``, ``int(x.shape[0] / n)`` with several workloads,
``min(k, x.size(-1))``), data-dependent
operations in ``forward`` (``.item()``, ``.tolist()``), item assignment into a traced
tensor, tensors computed at trace time from module-level tensors (they stay fx's
``_tensor_constant`` and the printer refuses them), and held-out workloads (never read:
the verdict judges them).
"""

from __future__ import annotations

import contextlib
import math
import operator
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from solforge.problems import gen
from solforge.problems.spec import Workload, call_with_params
from solforge.search.tagged import attribute_source, tag_attributes


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

    def __int__(self) -> int:
        """``int(...)`` of a traced number (Swin's ``int(windows.shape[0] / n)``): the
        value at the traced sizes, guarded, where the tracer may specialise
        (``_ValueTracer.specialise_int``); else Python's TypeError, as fx's."""
        return self.tracer.specialise_int(self)  # type: ignore[attr-defined]


class _ValueAttribute(fx.proxy.Attribute, _ValueProxy):
    pass


def _is_size(v: Any) -> bool:
    """An int, or a shape (a tuple of ints), as sizes are while traced."""
    if isinstance(v, (tuple, list)):
        return all(_is_size(x) for x in v)
    return isinstance(v, int) and not isinstance(v, bool)


# the functions a forward makes tensors with: traced as calls (see the module docstring)
FACTORIES = frozenset(f for f in (getattr(torch, n, None) for n in (
    "tensor", "as_tensor", "asarray", "scalar_tensor", "full", "zeros", "ones", "empty",
    "empty_strided", "arange", "linspace", "logspace", "eye", "rand", "randn", "randint",
    "randperm")) if f is not None)


class _FactoryCalls(TorchFunctionMode):
    """While the forward is traced (not while a node's value is computed), a factory call
    becomes a ``call_function`` node instead of a tensor fx would bake in as a constant."""

    def __init__(self, tracer: _ValueTracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and not self.tracer._evaluating:
            try:
                return self.tracer.create_proxy("call_function", func, args, kwargs)
            except NotImplementedError:  # an argument fx cannot hold (a numpy array)
                pass  # made now: fx's constant, which the printer refuses
        return func(*args, **kwargs)


class _ValueTracer(fx.Tracer):
    """fx's tracer, computing each node's example value on the meta device."""

    def __init__(self, root: nn.Module, inputs: list[Any], specialise: bool = False) -> None:
        super().__init__()
        # whether ``int()`` of a traced number may become its value (one workload only)
        self.specialise = specialise
        self.proxy_buffer_attributes = True  # buffers become get_attr nodes, as parameters
        self._root = root
        self._inputs = list(inputs)
        self._placeholder = 0
        self._evaluating = False

    def trace(self, root: Any, concrete_args: dict[str, Any] | None = None) -> fx.Graph:
        with _FactoryCalls(self):
            return super().trace(root, concrete_args)

    def create_arg(self, a: Any) -> Any:
        out = super().create_arg(a)
        # fx makes plain tensor attributes (``self.hidden = torch.randn(...)``) and
        # constants get_attr nodes without create_proxy: they need their value too
        if isinstance(out, fx.Node) and out.op == "get_attr" and "val" not in out.meta:
            out.meta["val"] = self._evaluate(out)
        return out

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
            i = self._placeholder
            self._placeholder += 1
            if i < len(self._inputs) and self._inputs[i] is not None:
                node.meta["val"] = self._inputs[i]
                return rv
            return self._specialise(rv, str(target), args, given=i < len(self._inputs))
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

    def to_bool(self, obj: fx.Proxy) -> bool:
        """A Python branch on a traced value: an equality check of sizes or devices is
        taken as traced and guarded in the graph (see the module docstring); anything
        else is fx's control-flow error."""
        node = obj.node
        vals = _meta_values(node.args)
        if node.op == "call_function" and node.target in (operator.eq, operator.ne) and \
                isinstance(node.meta.get("val"), bool) and len(vals) == 2 and \
                (all(_is_size(v) for v in vals) or
                 all(isinstance(v, torch.device) for v in vals)):
            value = node.meta["val"]
            held = node.target if value else \
                (operator.ne if node.target is operator.eq else operator.eq)
            check = self.create_proxy("call_function", held,
                                      fx.node.map_arg(node.args, self.proxy), {})
            self.create_proxy("call_function", torch._assert,
                              (check, "a size or device check that held when traced: this "
                                      "forward is specialised to it"), {})
            if not node.users:
                self.graph.erase_node(node)
            return value
        return super().to_bool(obj)

    def specialise_int(self, obj: fx.Proxy) -> int:
        """``int(x)`` of a traced number ``x``: its value at the traced sizes, and a guard
        in the graph (``int(x) == value``) that fails clearly at any other size. Only
        where the problem has one workload (``specialise``): with several, their graphs
        would differ by the value and the trace fail anyway, later and less clearly."""
        val = obj.node.meta.get("val")
        if not self.specialise or not isinstance(val, (int, float)) or \
                isinstance(val, bool) or not math.isfinite(val):
            raise TypeError("int() argument must be a string, a bytes-like object or a "
                            "real number, not '_ValueProxy'")
        value = int(val)
        as_int = self.create_proxy("call_function", int, (obj,), {})
        check = self.create_proxy("call_function", operator.eq, (as_int, value), {})
        self.create_proxy("call_function", torch._assert,
                          (check, f"int() of a size was {value} when traced: this forward "
                                  "is specialised to the problem's one workload"), {})
        return value

    def _specialise(self, rv: fx.Proxy, name: str, default: tuple, given: bool) -> Any:
        """A parameter ``get_inputs()`` gives ``None`` for (``given``) or nothing: the
        forward gets the value itself (its ``is None`` branches are Python), and the graph
        a guard that fails for any other value."""
        if given:
            value = None
        elif default:
            value = default[0]
        else:
            raise TraceError(f"forward takes more inputs than get_inputs() returns "
                             f"({name!r} has no input and no default)")
        if value is not None and type(value) not in (bool, int, float, str):
            raise TraceError(f"forward's parameter {name!r} has no input, and its default "
                             f"{value!r} is no value the graph can check")
        rv.node.meta["val"] = value
        same = operator.is_ if value is None or type(value) is bool else operator.eq
        check = self.create_proxy("call_function", same, (rv, value), {})
        why = "get_inputs() gives None for it" if given else "get_inputs() gives no value for it"
        self.create_proxy("call_function", torch._assert,
                          (check, f"{name} was traced as {value!r} ({why}); this forward "
                                  f"takes no other value"), {})
        return value

    def _evaluate(self, node: fx.Node) -> Any:
        args, kwargs = _meta_values(node.args), _meta_values(node.kwargs)
        if node.op == "get_attr":
            obj: Any = self._root
            for atom in str(node.target).split("."):
                obj = getattr(obj, atom)
            if isinstance(obj, torch.Tensor) and not obj.is_meta:
                obj = obj.to("meta")  # a plain tensor attribute, which .to() left behind
            return obj
        if node.op == "call_function":
            if node.target in FACTORIES:
                # on meta whatever device it names: a literal size costs nothing here,
                # and a CUDA device needs no GPU
                kwargs = {**kwargs, "device": "meta"}
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


# a constructor that reads values (``.item()``) is built again with factory tensors of at
# most this many elements on the CPU: Swin's drop-path rates, relative-position tables and
# shifted-window masks are all below it; weights of real layers are above it
HOST_ELEMENTS = 1 << 16


class _SmallOnHost(TorchFunctionMode):
    """Factory calls that name no device make small tensors on the CPU (their values can
    be read) and larger ones on the meta device (they cost nothing)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            meta = func(*args, **{**kwargs, "device": "meta"})
            if not isinstance(meta, torch.Tensor) or meta.numel() > HOST_ELEMENTS:
                return meta
        return func(*args, **kwargs)


class BuildError(TraceError):
    """A workload's model or inputs cannot be built for tracing."""


def _build_in(module: ModuleType, w: Workload, train_mode: bool, where: Any
              ) -> tuple[nn.Module, list[Any]]:
    params = dict(w.params)
    args = call_with_params(module.get_init_inputs, params)
    with where():
        model = module.Model(*(list(args) if isinstance(args, (list, tuple)) else [args]))
    if not isinstance(model, nn.Module):
        raise TraceError("the reference Model is not an nn.Module")
    with gen.distribution("normal"), where():
        inputs = call_with_params(module.get_inputs, params)
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    return (model.to("meta").train(train_mode),
            [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs])


def _build(module: ModuleType, w: Workload, train_mode: bool) -> tuple[nn.Module, list[Any]]:
    """The model and inputs on the meta device. Where that fails (a constructor or
    ``get_inputs`` that reads values): built again with small tensors on the CPU
    (:class:`_SmallOnHost`), and a small (``cpu``) workload whole on the CPU; then moved
    to meta."""
    ways = [("on the meta device", lambda: torch.device("meta")),
            ("with small tensors on the CPU", _SmallOnHost)]
    if w.cpu:
        ways.append(("on the CPU", contextlib.nullcontext))
    failed = []
    for label, where in ways:
        try:
            return _build_in(module, w, train_mode, where)
        except Exception as e:
            failed.append(f"{label}: {type(e).__name__}: {e}")
    raise BuildError(f"workload {w.name}: building the model or inputs failed "
                     + "; ".join(failed))


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


def trace_workload(module: ModuleType, w: Workload, train_mode: bool = False,
                   specialise: bool = False) -> tuple[fx.Graph, nn.Module]:
    """One workload's graph with example values, and the meta model it was traced on.
    ``specialise``: ``int()`` of a traced number becomes its value, guarded (the
    problem has this one workload)."""
    with _TRACE_LOCK:
        return _trace_workload(module, w, train_mode, specialise)


def _trace_workload(module: ModuleType, w: Workload, train_mode: bool, specialise: bool
                    ) -> tuple[fx.Graph, nn.Module]:
    model, inputs = _build(module, w, train_mode)
    tag_attributes(model)
    tracer = _ValueTracer(model, inputs, specialise)
    try:
        graph = tracer.trace(model)
    except TraceError as e:
        raise TraceError(f"workload {w.name}: {e}") from None
    except Exception as e:  # fx's own TraceError, TypeError from a proxy, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = ""
        if "interpreted as an integer" in first or "int() argument" in first:
            hint = (" (Python uses a traced size or value as a number, e.g. a loop over "
                    "range(x.size(0)) or int(x.shape[0] / n): sizes stay symbolic in the "
                    "graph)")
        raise TraceError(f"workload {w.name}: torch.fx cannot trace the reference: "
                         f"{type(e).__name__}: {first}{hint}") from None
    written = [f"{prefix}.{k}" if prefix else k for prefix, mod in model.named_modules()
               for k, v in vars(mod).items() if isinstance(v, fx.Proxy)]
    if written:
        raise TraceError(f"workload {w.name}: forward writes a traced value to module state "
                         f"(self.{written[0]} = ...): the graph carries its outputs, not "
                         "the state a later call reads")
    return graph, model
