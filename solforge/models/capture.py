"""What a model's modules are called with, and how long each takes: forward hooks on a live
model for one step.

:func:`capture_calls` records, for every leaf module and every composite module whose class
occurs at least twice in the model (an MLP, an MoE block: a fused region), each call's
tensor arguments by name (shape, dtype and value statistics: mean and standard deviation of
floats, the range of integers, so a problem's inputs look like the real ones) and whether
its output is a tensor or a tuple of tensors. A call with any other argument (a cache, a
tuple of tensors, a flag away from its default) is recorded as not capturable, with why.

:func:`profile_modules` times a step (the median of three) with every module timed: CUDA
events around each call on a GPU (device time, read after one synchronisation, so the
timing adds no sync), the host clock on a CPU. Times of nested modules overlap (an MLP's
include its Linear layers).

:func:`profile_backward` times a training step (forward, then backward of a scalar of the
output) with every module's backward timed by full backward hooks.

Not covered: modules called with tensors inside containers, and time spent between modules (attention kernels inside an attention module that is not capturable show
in the model's total, not in any problem's share).
"""

from __future__ import annotations

import inspect
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor argument as the problem file regenerates it."""

    name: str
    shape: tuple[int, ...]
    dtype: str                          # "float32", "int64", ...
    low: float = 0.0                    # integers: the observed range; floats: mean, std
    high: float = 0.0

    def signature(self) -> tuple[str, tuple[int, ...], str]:
        return (self.name, self.shape, self.dtype)

    def as_param(self) -> dict[str, Any]:
        """As a problem's workload lists it: floats by mean and std, booleans by the
        fraction true, integers by their range."""
        head = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.dtype.startswith(("float", "bfloat")):
            return head | {"mean": self.low, "std": self.high}
        if self.dtype == "bool":
            return head | {"p": self.high}
        return head | {"low": int(self.low), "high": int(self.high)}


@dataclass
class Call:
    """One call of one module."""

    path: str
    inputs: tuple[TensorSpec, ...] = ()
    reason: str = ""                    # why it cannot be a problem; "" when it can
    outputs: tuple[TensorSpec, ...] = ()  # what it returned (a backward problem's grads in)

    def signature(self) -> tuple:
        return tuple(t.signature() for t in self.inputs)


@dataclass
class Capture:
    """Every captured call of one step, in call order, and the modules looked at."""

    calls: list[Call] = field(default_factory=list)
    modules: dict[str, nn.Module] = field(default_factory=dict)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_spec(name: str, t: torch.Tensor) -> TensorSpec:
    if t.is_floating_point():
        x = t.detach().float()
        low, high = float(x.mean()), float(x.std()) if x.numel() > 1 else 0.0
    elif t.dtype == torch.bool:
        low, high = 0.0, float(t.float().mean())
    elif t.numel():
        low, high = float(t.min()), float(t.max())
    else:
        low, high = 0.0, 0.0
    return TensorSpec(name, tuple(t.shape), dtype_name(t.dtype), round(low, 6), round(high, 6))


def candidate_modules(root: nn.Module) -> dict[str, nn.Module]:
    """Leaf modules, and composite ones whose class occurs twice or more (not the root,
    not containers)."""
    named = [(n, m) for n, m in root.named_modules() if n and not isinstance(m, _CONTAINERS)]
    counts = Counter(type(m) for _, m in named)
    return {n: m for n, m in named
            if not any(True for _ in m.children()) or counts[type(m)] >= 2}


def bind_call(module: nn.Module, args: tuple, kwargs: dict) -> tuple[list[TensorSpec], str]:
    """The call's tensor arguments by forward-parameter name, or a reason it has others."""
    try:
        sig = inspect.signature(type(module).forward)
        bound = sig.bind(module, *args, **kwargs)
    except (TypeError, ValueError) as e:
        return [], f"its call does not bind to forward's signature: {e}"
    out: list[TensorSpec] = []
    params = sig.parameters
    for name, value in list(bound.arguments.items())[1:]:
        p = params[name]
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            if value:
                return [], f"takes *args/**kwargs ({name})"
            continue
        if isinstance(value, torch.Tensor):
            if out and any(t.name == name for t in out):
                continue
            if p.kind is p.KEYWORD_ONLY:
                return [], f"tensor {name!r} is keyword-only"
            out.append(tensor_spec(name, value))
        elif p.default is not p.empty and _same(value, p.default):
            continue
        elif value is None and p.default is p.empty:
            return [], f"argument {name!r} is None"
        else:
            return [], f"argument {name!r} is a {type(value).__name__}, not a tensor"
    # a tensor after a left-out parameter must still be passed positionally: forbid gaps
    names = [n for n in list(params)[1:] if params[n].kind is not params[n].VAR_KEYWORD]
    taken = [names.index(t.name) for t in out]
    if taken != list(range(len(taken))):
        return [], "its tensor arguments are not forward's leading parameters"
    if not out:
        return [], "no tensor arguments"
    return out, ""


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:
        return False


def _output_ok(out: Any) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    return isinstance(out, tuple) and bool(out) and all(isinstance(o, torch.Tensor)
                                                        for o in out)


def capture_calls(root: nn.Module, prepare: Callable[[], Any],
                  run: Callable[[Any], Any]) -> Capture:
    """``run(prepare())`` once, hooks on :func:`candidate_modules` during ``run`` only (a
    decode step's prefill, done by ``prepare``, is not captured); their calls."""
    cap = Capture(modules=candidate_modules(root))
    pending: dict[int, list[Call]] = {}
    handles = []

    def pre(path: str) -> Callable:
        def hook(m: nn.Module, args: tuple, kwargs: dict) -> None:
            specs, reason = bind_call(m, args, kwargs)
            call = Call(path=path, inputs=tuple(specs), reason=reason)
            cap.calls.append(call)
            pending.setdefault(id(m), []).append(call)
        return hook

    def post(m: nn.Module, args: tuple, kwargs: dict, out: Any) -> None:
        stack = pending.get(id(m))
        if stack:
            call = stack.pop()
            if not call.reason and not _output_ok(out):
                call.reason = f"returns a {type(out).__name__}, not tensors"
            elif not call.reason:
                outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
                call.outputs = tuple(tensor_spec(f"out{i}", o) for i, o in enumerate(outs))

    inputs = prepare()
    for path, m in cap.modules.items():
        handles.append(m.register_forward_pre_hook(pre(path), with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    try:
        with torch.no_grad():
            run(inputs)
    finally:
        for h in handles:
            h.remove()
    return cap


def _clock(cuda: bool) -> tuple[Callable[[], Any], Callable[[Any, Any], float]]:
    """(a mark now, the ms between two marks): CUDA events on a GPU (read after one
    synchronisation, so marking adds no sync), the host clock on a CPU."""
    def now() -> Any:
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) if cuda else (b - a) * 1e3

    return now, ms


def profile_modules(root: nn.Module, prepare: Callable[[], Any], run: Callable[[Any], Any],
                    paths: list[str], warmup: int = 1, repeats: int = 3
                    ) -> tuple[float, dict[str, list[float]]]:
    """(the step's time in ms, each path's call times in ms): medians over ``repeats``
    timed ``run(prepare())`` after ``warmup`` untimed ones, every module of ``paths`` timed
    at once, ``prepare`` never timed."""
    modules = dict(root.named_modules())
    cuda = any(p.is_cuda for p in root.parameters())
    with torch.no_grad():
        for _ in range(warmup):
            run(prepare())
    marks: dict[str, list[list[Any]]] = {}
    handles = []

    now, ms = _clock(cuda)

    timing = [False]  # a decode step's prefill (``prepare``) runs with the hooks too

    def pre(path: str) -> Callable:
        def hook(_m: nn.Module, _a: tuple) -> None:
            if timing[0]:
                marks[path].append([now(), None])
        return hook

    def post(path: str) -> Callable:
        def hook(_m: nn.Module, _a: tuple, _o: Any) -> None:
            if timing[0]:
                marks[path][-1][1] = now()
        return hook

    for path in paths:
        handles.append(modules[path].register_forward_pre_hook(pre(path)))
        handles.append(modules[path].register_forward_hook(post(path)))
    totals: list[float] = []
    calls: dict[str, list[list[float]]] = {p: [] for p in paths}
    try:
        for _ in range(repeats):
            timing[0] = False
            inputs = prepare()
            marks.update({p: [] for p in paths})
            timing[0] = True
            with torch.no_grad():
                start = now()
                run(inputs)
                end = now()
            timing[0] = False
            if cuda:
                torch.cuda.synchronize()
            totals.append(ms(start, end))
            for p, v in marks.items():
                calls[p].append([ms(a, b) for a, b in v if b is not None])
    finally:
        for h in handles:
            h.remove()
    # the same step calls each module the same number of times: median per call
    return statistics.median(totals), {
        p: [statistics.median(x) for x in zip(*runs)] for p, runs in calls.items()}


def _scalar(out: Any) -> torch.Tensor:
    """A scalar of a step's output to run backward from: the first floating tensor in it (a
    tensor, a tuple, or a ModelOutput's fields), reduced."""
    items = [out] if isinstance(out, torch.Tensor) else (
        list(out.values()) if hasattr(out, "values") else list(out)
        if isinstance(out, (tuple, list)) else [])
    for t in items:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad:
            return t.float().square().mean()
    raise ValueError(f"the step's output ({type(out).__name__}) holds no floating tensor "
                     "that requires grad: nothing to run backward from")


def profile_backward(root: nn.Module, prepare: Callable[[], Any], run: Callable[[Any], Any],
                     paths: list[str], warmup: int = 2, repeats: int = 3
                     ) -> tuple[float, dict[str, list[float]]]:
    """(a training step's time in ms, each path's backward times in ms): medians over
    ``repeats`` steps of ``run(prepare())`` then backward of a scalar of its output, after
    ``warmup`` untimed ones; each module's backward timed from its full backward pre-hook
    (its output's gradient is ready) to its full backward hook (its inputs' are). A module
    whose inputs need no gradient and whose parameters are frozen has no backward calls."""
    modules = dict(root.named_modules())
    cuda = any(p.is_cuda for p in root.parameters())

    now, ms = _clock(cuda)

    def step() -> None:
        with torch.enable_grad(), warnings.catch_warnings():
            # a module whose inputs need no grad (an embedding) is timed from its output's
            # gradient: what torch warns about is what is wanted here
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss = _scalar(run(prepare()))
            loss.backward()
        root.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    marks: dict[str, list[list[Any]]] = {p: [] for p in paths}
    timing = [False]

    def pre(path: str) -> Callable:
        def hook(_m: nn.Module, _g: Any) -> None:
            if timing[0]:
                marks[path].append([now(), None])
        return hook

    def post(path: str) -> Callable:
        def hook(_m: nn.Module, _gi: Any, _go: Any) -> None:
            if timing[0] and marks[path] and marks[path][-1][1] is None:
                marks[path][-1][1] = now()
        return hook

    handles = []
    for path in paths:
        handles.append(modules[path].register_full_backward_pre_hook(pre(path)))
        handles.append(modules[path].register_full_backward_hook(post(path)))
    totals: list[float] = []
    calls: dict[str, list[list[float]]] = {p: [] for p in paths}
    try:
        for _ in range(repeats):
            for p in paths:
                marks[p] = []
            timing[0] = True
            start = now()
            step()
            end = now()
            timing[0] = False
            if cuda:
                torch.cuda.synchronize()
            totals.append(ms(start, end))
            for p, v in marks.items():
                calls[p].append([ms(a, b) for a, b in v if b is not None])
    finally:
        for h in handles:
            h.remove()
    return statistics.median(totals), {
        p: [statistics.median(x) for x in zip(*runs)] if all(runs) else []
        for p, runs in calls.items()}
