"""What a solution's source contains, read from its AST: the model the static policy's rules
(``bench/policy/static.py``) query.

:class:`SourceModule` indexes one file: its imports and their aliases, its classes (with
their local bases), functions and module-level names. :class:`Analyzer` follows calls from
an entry point (``ModelNew.forward``, :func:`entry_points`) through the functions of the
file it can resolve, and records what each does (:class:`Effects`): launches of the
solution's own kernels, PyTorch compute calls, frame and heap access. The tables below say
which names count as neutral (allocation, views, settings), as own-kernel builders, and as
harness access.

Not covered: anything decided at run time (``exec``, ``getattr`` with computed names,
imports of files next to the solution); a call through an object this cannot resolve is
counted as an own launch (no false alarm, a possible miss).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

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
DEVICE_TESTS = ("is_cuda", "is_available", "TRITON_INTERPRET", "is_cpu")
FRAME_CALLS = {"sys._getframe": "walks interpreter frames",
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
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "tb_frame", "gi_frame"}
LOADER_NAMES = {"load_problem", "find_builtin", "import_file", "builtin_problems"}


@dataclass
class _Class:
    node: ast.ClassDef
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)
    attrs: dict[str, ast.expr] = field(default_factory=dict)   # self.<attr> = <expr>
    bases: list[str] = field(default_factory=list)


@dataclass
class Effects:
    """What a piece of code does, transitively through the file's own functions."""

    own: list[int] = field(default_factory=list)     # lines of own-kernel launches
    torch: list[tuple[int, str]] = field(default_factory=list)  # (line, what)

    def merge(self, other: Effects) -> None:
        self.own += other.own
        self.torch += other.torch


class SourceModule:
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
                            if isinstance(t, ast.Attribute) and is_self(t.value):
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


def is_self(e: ast.expr) -> bool:
    return isinstance(e, ast.Name) and e.id == "self"


def _assigned(node: ast.AST) -> list[str]:
    out = []
    if isinstance(node, ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Name):
                out.append(t.id)
            elif isinstance(t, ast.Attribute) and is_self(t.value):
                out.append(f"self.{t.attr}")
    return out


def _third_party(name: str) -> bool:
    root = name.split(".")[0]
    return root not in _STDLIB_NEUTRAL and root not in ("torch", "triton", "solforge",
                                                         "self", "cutlass")


class Analyzer:
    """Effects of functions, following calls into the file's own code (memoised)."""

    def __init__(self, mod: SourceModule) -> None:
        self.m = mod
        self.cache: dict[int, Effects] = {}

    def function(self, fn: ast.AST, cls: str | None) -> Effects:
        key = id(fn)
        if key in self.cache:
            return self.cache[key]
        self.cache[key] = eff = Effects()  # recursion guard
        if _decorated(self.m, fn, ("torch.compile",)):
            eff.torch.append((fn.lineno, f"{fn.name}, a torch.compile'd function"))
        body = getattr(fn, "body", [])
        eff.merge(self.block(body if isinstance(body, list) else [body], cls))
        return eff

    def block(self, nodes: list[ast.AST], cls: str | None) -> Effects:
        eff = Effects()
        for root in nodes:
            for node in ast.walk(root):
                if isinstance(node, ast.Call):
                    eff.merge(self.call(node, cls))
                elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                    eff.torch.append((node.lineno, "the @ operator (a PyTorch matmul)"))
        return eff

    @staticmethod
    def _own(line: int) -> Effects:
        return Effects(own=[line])

    def bound(self, expr: ast.expr, cls: str | None, line: int, what: str) -> Effects:
        """Calling the object an assignment bound to ``expr`` (a module name, ``self.x``)."""
        if isinstance(expr, ast.Lambda):
            return self.block([expr.body], cls)
        if isinstance(expr, (ast.Name, ast.Attribute)):
            return self.reference(expr, cls, line)
        if not isinstance(expr, ast.Call):
            return self._own(line)  # unknown object: it may launch a kernel
        made = self.m.dotted(expr.func) or ""
        if made == "torch.compile":
            eff = Effects(torch=[(line, f"{what}, a torch.compile'd function")])
            for a in expr.args[:1]:
                eff.merge(self.reference(a, cls, line))
            return eff
        if made.startswith("torch.nn.") and made.split(".")[-1][:1].isupper():
            return Effects(torch=[(line, f"{what}, a {made} module")])
        if made in self.m.classes:
            found = self.m.method(made, "forward") or self.m.method(made, "__call__")
            if found:
                return self.function(found[1], found[0])
            base = self.m.torch_base(made)
            if base:
                return Effects(torch=[(line, f"{what}, a {base} module")])
        # a kernel builder (cuda.compile, load_inline, cute.compile, ctypes...) or the
        # result of a call we cannot read: either way, possibly the solution's own kernel
        return self._own(line)

    def reference(self, e: ast.expr, cls: str | None, line: int) -> Effects:
        """Effects of calling the callable that expression ``e`` names."""
        if isinstance(e, ast.Lambda):
            return self.block([e.body], cls)
        if isinstance(e, ast.Attribute) and is_self(e.value):
            found = self.m.method(cls, e.attr)
            if found:
                return self.function(found[1], found[0])
            c = self.m.classes.get(cls or "")
            if c and e.attr in c.attrs:
                return self.bound(c.attrs[e.attr], cls, line, f"self.{e.attr}")
            return self._own(line)  # set elsewhere (setattr, a base we cannot read)
        name = self.m.dotted(e)
        return self._own(line) if name is None else self.by_name(name, e, cls, line)

    def by_name(self, name: str, func: ast.expr, cls: str | None, line: int) -> Effects:
        head = name.split(".")[0]
        if name in self.m.functions:
            fn = self.m.functions[name]
            if _decorated(self.m, fn, _KERNEL_DECORATORS) or _decorated(
                    self.m, fn, (".jit", ".kernel", ".autotune"), suffix=True):
                return self._own(line)
            return self.function(fn, None)
        if name in self.m.classes:
            return Effects()  # constructing an object is not the forward's work
        if name in self.m.bindings:
            return self.bound(self.m.bindings[name], None, line, name)
        if head in self.m.bindings:  # ext.fn(...) on a bound object
            return self.bound(self.m.bindings[head], None, line, head)
        if head in self.m.functions:  # kernel.run(...), kernel.warmup(...)
            return self._own(line) if _decorated(
                self.m, self.m.functions[head], _KERNEL_DECORATORS) else Effects()
        if name.startswith("torch."):
            return self._torch(name, line)
        if name.startswith("solforge.kernels"):
            return Effects() if name.endswith(("cdiv", "next_power_of_2")) else \
                self._own(line)
        if head in ("triton", "cutlass") or head in _STDLIB_NEUTRAL or head == "super":
            return Effects()
        local_root = isinstance(func, (ast.Name, ast.Attribute)) and root_name(func) in self.m.alias
        if local_root and _third_party(name):
            return self._own(line)  # a third-party package may launch kernels
        if isinstance(func, ast.Attribute) and func.attr in _TENSOR_COMPUTE:
            return Effects(torch=[(line, f"Tensor.{func.attr}")])
        return Effects()

    def call(self, node: ast.Call, cls: str | None) -> Effects:
        f = node.func
        line = node.lineno
        if isinstance(f, ast.Subscript):  # kernel[grid](...)
            return self._own(line)
        if isinstance(f, ast.Attribute) and is_self(f.value):
            return self.reference(f, cls, line)
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and isinstance(
                f.value.func, ast.Name) and f.value.func.id == "super":
            parent = self._local_base(cls)
            found = self.m.method(parent, f.attr) if parent else None
            if found:
                return self.function(found[1], found[0])
            base = self.m.torch_base(cls or "")
            if f.attr == "forward" and base:
                return Effects(torch=[(line, f"{base}.forward via super()")])
            return Effects()
        name = self.m.dotted(f)
        if name is None:  # a method of a call result or a subscript: a tensor, usually
            if isinstance(f, ast.Attribute) and f.attr in _TENSOR_COMPUTE:
                return Effects(torch=[(line, f"Tensor.{f.attr}")])
            return Effects()
        return self.by_name(name, f, cls, line)

    def _local_base(self, cls: str | None) -> str | None:
        c = self.m.classes.get(cls or "")
        if c is None:
            return None
        local = [b for b in c.bases if b in self.m.classes]
        return local[0] if local else None

    def _torch(self, name: str, line: int) -> Effects:
        short = name[len("torch."):]
        if name.startswith(_OWN_TORCH_PREFIX):
            return self._own(line)
        if name.startswith("torch.ops."):
            ns = short.split(".")[1] if "." in short else ""
            # a custom operator is the solution's own code; aten/prims are PyTorch's
            return Effects(torch=[(line, name)]) if ns in ("aten", "prims") else \
                self._own(line)
        if short in _NEUTRAL_TORCH or name.startswith(_NEUTRAL_TORCH_PREFIX):
            return Effects()
        if name.startswith("torch.nn.") and short.split(".")[-1][:1].isupper():
            return Effects()  # constructing a module
        return Effects(torch=[(line, name)])


def root_name(e: ast.expr) -> str:
    while isinstance(e, ast.Attribute):
        e = e.value
    return e.id if isinstance(e, ast.Name) else ""


def _decorated(mod: SourceModule, fn: ast.AST, names: tuple[str, ...], suffix: bool = False
               ) -> bool:
    for d in getattr(fn, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        name = mod.dotted(target) or ""
        if (name.endswith(names) if suffix else name.startswith(names)):
            return True
    return False


def entry_points(mod: SourceModule) -> list[tuple[str, ast.FunctionDef]]:
    """ModelNew's forward (and __call__), found in it or its local base classes."""
    if "ModelNew" not in mod.classes:
        return []
    found = [mod.method("ModelNew", n) for n in ("forward", "__call__")]
    return [f for f in found if f is not None]
