"""The static half of the policy: what a solution's source says it does, read from its AST.

Nothing here runs the solution. :func:`check_source` returns :class:`Finding`\\ s, each with
a rule, the flag it raises, a source line and a sentence a kernel engineer can check by
reading that line. The rules (see ``policy.py`` for how findings become verdicts):

``torch_fallback.no_own_kernel`` (languages whose point is their own kernels: triton,
  cuda_cpp, cute_dsl). Starting from ``ModelNew.forward``, every function of the file it
  can reach (module functions, methods, local sub-modules, what ``torch.compile`` wraps)
  is read; if none of them launches a kernel of the solution's own and they call PyTorch
  to compute, the work is PyTorch's. A *launch* is ``k[grid](...)`` (Triton, Numba), a
  call of a ``@triton.jit``/``@cute.jit`` function, of an object built by
  ``solforge.kernels.cuda.compile``, ``load_inline``/``load``, ``cute.compile``, ctypes,
  a ``torch.ops`` namespace other than ``aten``, any ``solforge.kernels`` function, or
  any call into a third-party package (which may launch kernels: the rule gives it the
  benefit of the doubt). Allocating outputs (``torch.empty``), views, reshapes, dtype
  casts and a cuBLAS GEMM *beside* a kernel of the solution's own are fair and never
  raise it: this rule only fires when there is no own kernel at all.
``hidden_fallback.try_except``: a ``try`` whose body launches an own kernel and one of
  whose ``except`` handlers computes with PyTorch (directly or through a helper).
``hidden_fallback.guarded_branch``: an ``if`` on a flag set in an ``except`` handler
  (``HAS_TRITON = False``) or on the device (``x.is_cuda``, ``device.type``,
  ``torch.cuda.is_available()``, ``TRITON_INTERPRET``) with an own kernel on one side
  and PyTorch on the other (an early ``return`` counts as the other side).
``calls_reference.import``: imports the problem's module (by its file name), the
  runner's copy of it (``solforge_reference*``) or solforge's problem loader; or names
  the problem file in a call.
``harness_access.*``: imports ``solforge.bench``; walks interpreter frames
  (``sys._getframe``, ``inspect.stack``, ``f_back``/``f_locals``), scans the heap
  (``gc.get_objects``/``get_referrers``), reads ``sys.modules``, installs trace hooks,
  swaps ``__code__``, or rebinds a library attribute to a function of its own
  (``time.perf_counter = ...``; plain settings such as ``torch.backends...allow_tf32 =
  True`` are fine). None of these has a use in an honest kernel; all are how the
  harness gets rewritten from inside.

Not covered (the dynamic rules and the judge's own checks are the backstop): code built
at run time (``exec`` of strings, ``getattr`` with computed names, imports of modules
next to the solution), kernels launched through an unresolvable object (counted as own,
so no false alarm but a possible miss), and any intent the source does not show.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from solforge.bench.records import Finding

_NEUTRAL_TORCH = {
    # allocation, layout, metadata, streams, modes: no arithmetic of the problem
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "arange", "tensor", "as_tensor", "as_strided", "from_numpy",
    "is_tensor", "numel", "broadcast_shapes", "manual_seed", "no_grad", "inference_mode",
    "enable_grad", "set_grad_enabled", "device", "dtype", "Size", "finfo", "iinfo",
    "get_default_dtype", "is_floating_point", "is_complex", "result_type",
    "promote_types", "Generator", "autocast",
}
_NEUTRAL_TORCH_PREFIX = ("torch.cuda.", "torch.backends.", "torch.testing.",
                         "torch.distributed.", "torch.profiler.", "torch.autograd.",
                         "torch.utils.data.", "torch._dynamo.", "torch._inductor.config",
                         "torch.library.")
_OWN_TORCH_PREFIX = ("torch.utils.cpp_extension.", "torch.cuda.jiterator.")
_OWN_BUILDERS = ("compile", "load_inline", "load", "RawKernel", "RawModule", "CDLL",
                 "cdll", "module_from_source", "SourceModule")
_STDLIB_NEUTRAL = {
    "math", "os", "sys", "time", "functools", "itertools", "collections", "typing",
    "dataclasses", "enum", "abc", "warnings", "logging", "threading", "concurrent",
    "queue", "random", "re", "json", "pathlib", "contextlib", "operator", "copy",
    "numpy", "builtins", "weakref", "hashlib", "struct", "inspect", "gc", "traceback",
    "multiprocessing", "subprocess", "tempfile", "importlib", "pickle", "io", "types",
}
_KERNEL_DECORATORS = ("triton.jit", "triton.autotune", "triton.heuristics",
                      "cutlass.cute.jit", "cutlass.cute.kernel", "numba.cuda.jit",
                      "numba.jit")
_TENSOR_COMPUTE = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "sum", "mean", "var", "std", "softmax",
    "log_softmax", "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt",
    "rsqrt", "pow", "max", "min", "amax", "amin", "norm", "cumsum", "prod", "mul", "add",
    "sub", "div", "clamp", "abs", "neg", "reciprocal", "einsum", "conv2d", "linear",
    "layer_norm", "topk", "sort", "argmax", "argmin", "where", "masked_fill", "scatter",
    "scatter_add", "index_add", "gather", "mul_", "add_", "sub_", "div_", "clamp_",
    "relu_", "exp_", "sigmoid_", "tanh_",
}
_DEVICE_TESTS = ("is_cuda", "is_available", "TRITON_INTERPRET", "is_cpu")
_FRAME_CALLS = {"sys._getframe": "walks interpreter frames",
                "inspect.currentframe": "walks interpreter frames",
                "inspect.stack": "walks interpreter frames",
                "inspect.getouterframes": "walks interpreter frames",
                "inspect.trace": "walks interpreter frames",
                "gc.get_objects": "scans the heap for objects it did not create",
                "gc.get_referrers": "scans the heap for objects it did not create",
                "gc.get_referents": "scans the heap for objects it did not create",
                "sys.settrace": "installs an interpreter trace hook",
                "sys.setprofile": "installs an interpreter trace hook",
                "threading.settrace": "installs an interpreter trace hook",
                "threading.setprofile": "installs an interpreter trace hook"}
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "tb_frame", "gi_frame"}
_LOADER_NAMES = {"load_problem", "find_builtin", "import_file", "builtin_problems"}


@dataclass
class _Class:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)
    attrs: dict[str, ast.expr] = field(default_factory=dict)   # self.<attr> = <expr>
    bases: list[str] = field(default_factory=list)


@dataclass
class _Effects:
    """What a piece of code does, transitively through the file's own functions."""

    own: list[int] = field(default_factory=list)     # lines of own-kernel launches
    torch: list[tuple[int, str]] = field(default_factory=list)  # (line, what)

    def merge(self, other: _Effects) -> None:
        self.own += other.own
        self.torch += other.torch


class _Module:
    """The solution file: imports, functions, classes, bindings; and call resolution."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.alias: dict[str, str] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.classes: dict[str, _Class] = {}
        self.bindings: dict[str, ast.expr] = {}
        self.except_flags: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.alias[local] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.alias[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.ExceptHandler):
                for sub in ast.walk(node):
                    for t in _assigned(sub):
                        self.except_flags.add(t)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node  # type: ignore[assignment]
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name] = self._class(node)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.bindings[t.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.value is not None:
                self.bindings[node.target.id] = node.value

    def _class(self, node: ast.ClassDef) -> _Class:
        c = _Class(node, bases=[self.dotted(b) or "" for b in node.bases])
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                c.methods[item.name] = item  # type: ignore[assignment]
                for sub in ast.walk(item):
                    if isinstance(sub, ast.Assign):
                        for t in sub.targets:
                            if isinstance(t, ast.Attribute) and _is_self(t.value):
                                c.attrs[t.attr] = sub.value
            elif isinstance(item, ast.Assign):
                for t in item.targets:
                    if isinstance(t, ast.Name):
                        c.attrs[t.id] = item.value
        return c

    # -- names ---------------------------------------------------------------------------
    def dotted(self, e: ast.expr) -> str | None:
        """``F.gelu`` -> ``torch.nn.functional.gelu``; ``self.fc`` -> ``self.fc``."""
        parts: list[str] = []
        while isinstance(e, ast.Attribute):
            parts.append(e.attr)
            e = e.value
        if not isinstance(e, ast.Name):
            return None
        root = self.alias.get(e.id, e.id)
        return ".".join([root, *reversed(parts)])

    def method(self, cls: str | None, name: str) -> tuple[str, ast.FunctionDef] | None:
        seen = set()
        while cls and cls in self.classes and cls not in seen:
            seen.add(cls)
            c = self.classes[cls]
            if name in c.methods:
                return cls, c.methods[name]
            local = [b for b in c.bases if b in self.classes]
            cls = local[0] if local else None
        return None

    def torch_base(self, cls: str) -> str | None:
        c = self.classes.get(cls)
        if c is None:
            return None
        for b in c.bases:
            if b.startswith("torch.nn.") and b != "torch.nn.Module":
                return b
            if b in self.classes:
                found = self.torch_base(b)
                if found:
                    return found
        return None


def _is_self(e: ast.expr) -> bool:
    return isinstance(e, ast.Name) and e.id == "self"


def _assigned(node: ast.AST) -> list[str]:
    out = []
    if isinstance(node, ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Name):
                out.append(t.id)
            elif isinstance(t, ast.Attribute) and _is_self(t.value):
                out.append(f"self.{t.attr}")
    return out


def _third_party(name: str) -> bool:
    root = name.split(".")[0]
    return root not in _STDLIB_NEUTRAL and root not in ("torch", "triton", "solforge",
                                                         "self", "cutlass")


class _Analyzer:
    """Effects of functions, following calls into the file's own code (memoised)."""

    def __init__(self, mod: _Module) -> None:
        self.m = mod
        self.cache: dict[int, _Effects] = {}

    def function(self, fn: ast.AST, cls: str | None) -> _Effects:
        key = id(fn)
        if key in self.cache:
            return self.cache[key]
        self.cache[key] = eff = _Effects()  # recursion guard
        if _decorated(self.m, fn, ("torch.compile",)):
            eff.torch.append((fn.lineno, f"{fn.name}, a torch.compile'd function"))
        body = getattr(fn, "body", [])
        eff.merge(self.block(body if isinstance(body, list) else [body], cls))
        return eff

    def block(self, nodes: list[ast.AST], cls: str | None) -> _Effects:
        eff = _Effects()
        for root in nodes:
            for node in ast.walk(root):
                if isinstance(node, ast.Call):
                    eff.merge(self.call(node, cls))
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    eff.torch.append((node.lineno, "the @ operator (a PyTorch matmul)"))
        return eff

    @staticmethod
    def _own(line: int) -> _Effects:
        return _Effects(own=[line])

    def bound(self, expr: ast.expr, cls: str | None, line: int, what: str) -> _Effects:
        """Calling the object an assignment bound to ``expr`` (a module name, ``self.x``)."""
        if isinstance(expr, ast.Lambda):
            return self.block([expr.body], cls)
        if isinstance(expr, (ast.Name, ast.Attribute)):
            return self.reference(expr, cls, line)
        if not isinstance(expr, ast.Call):
            return self._own(line)  # unknown object: it may launch a kernel
        made = self.m.dotted(expr.func) or ""
        if made == "torch.compile":
            eff = _Effects(torch=[(line, f"{what}, a torch.compile'd function")])
            for a in expr.args[:1]:
                eff.merge(self.reference(a, cls, line))
            return eff
        if made.startswith("torch.nn.") and made.split(".")[-1][:1].isupper():
            return _Effects(torch=[(line, f"{what}, a {made} module")])
        if made in self.m.classes:
            found = self.m.method(made, "forward") or self.m.method(made, "__call__")
            if found:
                return self.function(found[1], found[0])
            base = self.m.torch_base(made)
            if base:
                return _Effects(torch=[(line, f"{what}, a {base} module")])
        # a kernel builder (cuda.compile, load_inline, cute.compile, ctypes...) or the
        # result of a call we cannot read: either way, possibly the solution's own kernel
        return self._own(line)

    def reference(self, e: ast.expr, cls: str | None, line: int) -> _Effects:
        """Effects of calling the callable that expression ``e`` names."""
        if isinstance(e, ast.Lambda):
            return self.block([e.body], cls)
        if isinstance(e, ast.Attribute) and _is_self(e.value):
            found = self.m.method(cls, e.attr)
            if found:
                return self.function(found[1], found[0])
            c = self.m.classes.get(cls or "")
            if c and e.attr in c.attrs:
                return self.bound(c.attrs[e.attr], cls, line, f"self.{e.attr}")
            return self._own(line)  # set elsewhere (setattr, a base we cannot read)
        name = self.m.dotted(e)
        return self._own(line) if name is None else self.by_name(name, e, cls, line)

    def by_name(self, name: str, func: ast.expr, cls: str | None, line: int) -> _Effects:
        head = name.split(".")[0]
        if name in self.m.functions:
            fn = self.m.functions[name]
            if _decorated(self.m, fn, _KERNEL_DECORATORS) or _decorated(
                    self.m, fn, (".jit", ".kernel", ".autotune"), suffix=True):
                return self._own(line)
            return self.function(fn, None)
        if name in self.m.classes:
            return _Effects()  # constructing an object is not the forward's work
        if name in self.m.bindings:
            return self.bound(self.m.bindings[name], None, line, name)
        if head in self.m.bindings:  # ext.fn(...) on a bound object
            return self.bound(self.m.bindings[head], None, line, head)
        if head in self.m.functions:  # kernel.run(...), kernel.warmup(...)
            return self._own(line) if _decorated(
                self.m, self.m.functions[head], _KERNEL_DECORATORS) else _Effects()
        if name.startswith("torch."):
            return self._torch(name, line)
        if name.startswith("solforge.kernels"):
            return _Effects() if name.endswith(("cdiv", "next_power_of_2")) else \
                self._own(line)
        if head in ("triton", "cutlass") or head in _STDLIB_NEUTRAL or head == "super":
            return _Effects()
        local_root = isinstance(func, (ast.Name, ast.Attribute)) and _root(func) in self.m.alias
        if local_root and _third_party(name):
            return self._own(line)  # a third-party package may launch kernels
        if isinstance(func, ast.Attribute) and func.attr in _TENSOR_COMPUTE:
            return _Effects(torch=[(line, f"Tensor.{func.attr}")])
        return _Effects()

    def call(self, node: ast.Call, cls: str | None) -> _Effects:
        f = node.func
        line = node.lineno
        if isinstance(f, ast.Subscript):  # kernel[grid](...)
            return self._own(line)
        if isinstance(f, ast.Attribute) and _is_self(f.value):
            return self.reference(f, cls, line)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and isinstance(
                f.value.func, ast.Name) and f.value.func.id == "super":
            parent = self._local_base(cls)
            found = self.m.method(parent, f.attr) if parent else None
            if found:
                return self.function(found[1], found[0])
            base = self.m.torch_base(cls or "")
            if f.attr == "forward" and base:
                return _Effects(torch=[(line, f"{base}.forward via super()")])
            return _Effects()
        name = self.m.dotted(f)
        if name is None:  # a method of a call result or a subscript: a tensor, usually
            if isinstance(f, ast.Attribute) and f.attr in _TENSOR_COMPUTE:
                return _Effects(torch=[(line, f"Tensor.{f.attr}")])
            return _Effects()
        return self.by_name(name, f, cls, line)

    def _local_base(self, cls: str | None) -> str | None:
        c = self.m.classes.get(cls or "")
        if c is None:
            return None
        local = [b for b in c.bases if b in self.m.classes]
        return local[0] if local else None

    def _torch(self, name: str, line: int) -> _Effects:
        short = name[len("torch."):]
        if name.startswith(_OWN_TORCH_PREFIX):
            return self._own(line)
        if name.startswith("torch.ops."):
            ns = short.split(".")[1] if "." in short else ""
            # a custom operator is the solution's own code; aten/prims are PyTorch's
            return _Effects(torch=[(line, name)]) if ns in ("aten", "prims") else \
                self._own(line)
        if short in _NEUTRAL_TORCH or name.startswith(_NEUTRAL_TORCH_PREFIX):
            return _Effects()
        if name.startswith("torch.nn.") and short.split(".")[-1][:1].isupper():
            return _Effects()  # constructing a module
        return _Effects(torch=[(line, name)])


def _root(e: ast.expr) -> str:
    while isinstance(e, ast.Attribute):
        e = e.value
    return e.id if isinstance(e, ast.Name) else ""


def _decorated(mod: _Module, fn: ast.AST, names: tuple[str, ...], suffix: bool = False
               ) -> bool:
    for d in getattr(fn, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        name = mod.dotted(target) or ""
        if (name.endswith(names) if suffix else name.startswith(names)):
            return True
    return False


def _entry(mod: _Module) -> list[tuple[str, ast.FunctionDef]]:
    """ModelNew's forward (and __call__), found in it or its local base classes."""
    if "ModelNew" not in mod.classes:
        return []
    found = [mod.method("ModelNew", n) for n in ("forward", "__call__")]
    return [f for f in found if f is not None]


def _describe(torch_calls: list[tuple[int, str]], limit: int = 4) -> str:
    seen: list[str] = []
    for line, what in sorted(torch_calls):
        item = f"{what} (line {line})"
        if item not in seen:
            seen.append(item)
    more = f" and {len(seen) - limit} more" if len(seen) > limit else ""
    return ", ".join(seen[:limit]) + more


def _no_own_kernel(mod: _Module, an: _Analyzer, language: str) -> list[Finding]:
    entry = _entry(mod)
    if not entry:
        base = mod.torch_base("ModelNew")
        if base:
            return [Finding(rule="torch_fallback.no_own_kernel", flag="torch_fallback",
                            line=mod.classes["ModelNew"].node.lineno,
                            message=f"ModelNew inherits {base}'s forward and defines none: "
                                    f"the work is PyTorch's, not {language} kernels")]
        return []
    eff = _Effects()
    for cls, fn in entry:
        eff.merge(an.function(fn, cls))
    if eff.own or not eff.torch:
        return []
    line = entry[0][1].lineno
    return [Finding(rule="torch_fallback.no_own_kernel", flag="torch_fallback", line=line,
                    message=f"the solution is {language} but ModelNew.forward launches no "
                            "kernel of its own (none reachable from it in this file); it "
                            f"computes with PyTorch: {_describe(eff.torch)}")]


def _hidden_fallbacks(mod: _Module, an: _Analyzer) -> list[Finding]:
    out: list[Finding] = []
    scopes: list[tuple[ast.AST, str | None]] = [(f, None) for f in mod.functions.values()]
    for name, c in mod.classes.items():
        scopes += [(m, name) for m in c.methods.values()]
    seen: set[int] = set()
    for scope, cls in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.Try) and node.lineno not in seen:
                body = an.block(node.body, cls)
                for h in node.handlers:
                    fallback = an.block(h.body, cls)
                    if body.own and fallback.torch and not fallback.own:
                        seen.add(node.lineno)
                        out.append(Finding(
                            rule="hidden_fallback.try_except", flag="hidden_fallback",
                            line=node.lineno,
                            message="a try block launches the solution's kernel and its "
                                    f"except handler (line {h.lineno}) computes with "
                                    f"PyTorch instead: {_describe(fallback.torch, 2)}"))
                        break
            elif isinstance(node, ast.If) and node.lineno not in seen:
                guard = _guard(mod, node.test)
                if not guard:
                    continue
                yes = an.block(node.body, cls)
                other = node.orelse or _rest_after(scope, node)
                no = an.block(other, cls)
                for a, b in ((yes, no), (no, yes)):
                    if a.own and b.torch and not b.own:
                        seen.add(node.lineno)
                        out.append(Finding(
                            rule="hidden_fallback.guarded_branch", flag="hidden_fallback",
                            line=node.lineno,
                            message=f"a branch on {guard} runs the solution's kernel on one "
                                    "side and PyTorch on the other: "
                                    f"{_describe(b.torch, 2)}"))
                        break
    return out


def _guard(mod: _Module, test: ast.expr) -> str | None:
    """What an ``if`` test checks, when it is a failure flag or the device."""
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and node.id in mod.except_flags:
            return f"'{node.id}' (set in an except handler)"
        if isinstance(node, ast.Attribute):
            if _is_self(node.value) and f"self.{node.attr}" in mod.except_flags:
                return f"'self.{node.attr}' (set in an except handler)"
            if node.attr in _DEVICE_TESTS or (node.attr == "type" and isinstance(
                    node.value, ast.Attribute) and node.value.attr == "device"):
                return "the device"
        if isinstance(node, ast.Constant) and node.value == "TRITON_INTERPRET":
            return "TRITON_INTERPRET"
    return None


def _rest_after(scope: ast.AST, node: ast.If) -> list[ast.stmt]:
    """Statements after an ``if`` whose body returns (the implicit else branch)."""
    if not node.body or not isinstance(node.body[-1], (ast.Return, ast.Raise)):
        return []
    for parent in ast.walk(scope):
        for fname in ("body", "orelse", "finalbody"):
            stmts = getattr(parent, fname, None)
            if isinstance(stmts, list) and node in stmts:
                return stmts[stmts.index(node) + 1:]
    return []


def _references(mod: _Module, problem_file: Path | None) -> list[Finding]:
    out: list[Finding] = []
    stem = problem_file.stem if problem_file else None
    fname = problem_file.name if problem_file else None

    def add(line: int, what: str) -> None:
        out.append(Finding(rule="calls_reference.import", flag="calls_reference", line=line,
                           message=what))

    for node in ast.walk(mod.tree):
        mods: list[str] = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for m in mods:
            last = m.split(".")[-1]
            if (stem and last == stem) or m.startswith(
                    ("solforge_reference", "solforge.problems.loader",
                     "solforge.problems.corpus")) \
                    or (m.startswith("solforge.problems.") and last in _LOADER_NAMES):
                add(node.lineno, f"imports {m}: the problem's reference (or the loader "
                                 "that builds it)")
                break
    docstrings = {id(n.body[0].value) for n in ast.walk(mod.tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                    ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings and (
                    (fname and fname in node.value) or "solforge_reference" in node.value):
            add(getattr(node, "lineno", 0), f"names the reference ({node.value!r})")
    return out


def _harness(mod: _Module) -> list[Finding]:
    out: list[Finding] = []

    def add(rule: str, line: int, what: str) -> None:
        out.append(Finding(rule=f"harness_access.{rule}", flag="harness_access", line=line,
                           message=what))

    for node in ast.walk(mod.tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n == "solforge.bench" or n.startswith("solforge.bench.") for n in names):
                add("imports_harness", node.lineno, "imports the evaluator's harness "
                    "(solforge.bench): a solution has no use for it")
        elif isinstance(node, ast.Call):
            name = mod.dotted(node.func) or ""
            if name in _FRAME_CALLS:
                add("introspection", node.lineno, f"{name}(): {_FRAME_CALLS[name]}")
        elif isinstance(node, ast.Attribute):
            if node.attr in _FRAME_ATTRS:
                add("introspection", node.lineno, f".{node.attr}: reads another frame's "
                    "variables")
            elif (mod.dotted(node) or "") == "sys.modules":
                add("introspection", node.lineno, "reads sys.modules (where the harness "
                    "and the reference's module live)")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and t.attr == "__code__":
                    add("monkeypatch", node.lineno, "replaces a function's __code__")
                elif isinstance(t, ast.Attribute) and not _is_self(t.value):
                    owner = mod.dotted(t.value)
                    if owner and _root(t.value) in mod.alias and _callable_value(
                            mod, node.value):
                        add("monkeypatch", node.lineno, f"rebinds {owner}.{t.attr} to a "
                            "function of its own (monkey-patching a library)")
    # one finding per rule and line is enough
    uniq: dict[tuple[str, int | None], Finding] = {}
    for f in out:
        uniq.setdefault((f.rule, f.line), f)
    return list(uniq.values())


def _callable_value(mod: _Module, v: ast.expr) -> bool:
    if isinstance(v, ast.Lambda):
        return True
    return isinstance(v, ast.Name) and (v.id in mod.functions or v.id in mod.classes)


def check_source(source: str, language: str, own_kernels: bool,
                 problem_file: Path | None = None) -> list[Finding]:
    """Every static finding of one solution's source (empty when it cannot be parsed:
    the build reports the syntax error)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    mod = _Module(tree)
    an = _Analyzer(mod)
    findings: list[Finding] = []
    if own_kernels:
        findings += _no_own_kernel(mod, an, language)
        findings += _hidden_fallbacks(mod, an)
    findings += _references(mod, problem_file)
    findings += _harness(mod)
    return findings


__all__ = ["check_source"]
