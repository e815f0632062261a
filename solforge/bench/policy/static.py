"""The static half of the policy: what a solution's source says it does, read from its AST
(the model of the source is ``bench/policy/source_model.py``; the rules are here).

Nothing here runs the solution. :func:`check_source` returns :class:`Finding`\\ s, each with
a rule, the flag it raises, a source line and a sentence a kernel engineer can check by
reading that line. The rules (see ``bench/policy/rules.py`` for how findings become verdicts):

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
from pathlib import Path

from solforge.bench.policy.source_model import (
    DEVICE_TESTS,
    FRAME_ATTRS,
    FRAME_CALLS,
    LOADER_NAMES,
    Analyzer,
    Effects,
    SourceModule,
    entry_points,
    is_self,
    root_name,
)
from solforge.records.evaluation import Finding


def _describe(torch_calls: list[tuple[int, str]], limit: int = 4) -> str:
    seen: list[str] = []
    for line, what in sorted(torch_calls):
        item = f"{what} (line {line})"
        if item not in seen:
            seen.append(item)
    more = f" and {len(seen) - limit} more" if len(seen) > limit else ""
    return ", ".join(seen[:limit]) + more


def _no_own_kernel(mod: SourceModule, an: Analyzer, language: str) -> list[Finding]:
    entry = entry_points(mod)
    if not entry:
        base = mod.torch_base("ModelNew")
        if base:
            return [Finding(rule="torch_fallback.no_own_kernel", flag="torch_fallback",
                            line=mod.classes["ModelNew"].node.lineno,
                            message=f"ModelNew inherits {base}'s forward and defines none: "
                                    f"the work is PyTorch's, not {language} kernels")]
        return []
    eff = Effects()
    for cls, fn in entry:
        eff.merge(an.function(fn, cls))
    if eff.own or not eff.torch:
        return []
    line = entry[0][1].lineno
    return [Finding(rule="torch_fallback.no_own_kernel", flag="torch_fallback", line=line,
                    message=f"the solution is {language} but ModelNew.forward launches no "
                            "kernel of its own (none reachable from it in this file); it "
                            f"computes with PyTorch: {_describe(eff.torch)}")]


def _hidden_fallbacks(mod: SourceModule, an: Analyzer) -> list[Finding]:
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


def _guard(mod: SourceModule, test: ast.expr) -> str | None:
    """What an ``if`` test checks, when it is a failure flag or the device."""
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and node.id in mod.except_flags:
            return f"'{node.id}' (set in an except handler)"
        if isinstance(node, ast.Attribute):
            if is_self(node.value) and f"self.{node.attr}" in mod.except_flags:
                return f"'self.{node.attr}' (set in an except handler)"
            if node.attr in DEVICE_TESTS or (node.attr == "type" and isinstance(
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


def _references(mod: SourceModule, problem_file: Path | None) -> list[Finding]:
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
                    or (m.startswith("solforge.problems.") and last in LOADER_NAMES):
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


def _harness(mod: SourceModule) -> list[Finding]:
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
            if name in FRAME_CALLS:
                add("introspection", node.lineno, f"{name}(): {FRAME_CALLS[name]}")
        elif isinstance(node, ast.Attribute):
            if node.attr in FRAME_ATTRS:
                add("introspection", node.lineno, f".{node.attr}: reads another frame's "
                    "variables")
            elif (mod.dotted(node) or "") == "sys.modules":
                add("introspection", node.lineno, "reads sys.modules (where the harness "
                    "and the reference's module live)")
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and t.attr == "__code__":
                    add("monkeypatch", node.lineno, "replaces a function's __code__")
                elif isinstance(t, ast.Attribute) and not is_self(t.value):
                    owner = mod.dotted(t.value)
                    if owner and root_name(t.value) in mod.alias and _callable_value(
                            mod, node.value):
                        add("monkeypatch", node.lineno, f"rebinds {owner}.{t.attr} to a "
                            "function of its own (monkey-patching a library)")
    # one finding per rule and line is enough
    uniq: dict[tuple[str, int | None], Finding] = {}
    for f in out:
        uniq.setdefault((f.rule, f.line), f)
    return list(uniq.values())


def _callable_value(mod: SourceModule, v: ast.expr) -> bool:
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
    mod = SourceModule(tree)
    an = Analyzer(mod)
    findings: list[Finding] = []
    if own_kernels:
        findings += _no_own_kernel(mod, an, language)
        findings += _hidden_fallbacks(mod, an)
    findings += _references(mod, problem_file)
    findings += _harness(mod)
    return findings


__all__ = ["check_source"]
