"""Writing candidates as solution files a kernel engineer can read and keep.

Every generated file opens with a docstring that says what the candidate does and which
levers it pulls. Two shapes follow:

- :func:`standalone_file` (the graph rewrites): the reference's ``Model`` copied without its
  ``forward`` and renamed ``ModelNew``, with the module-level code its constructor needs,
  then the new ``forward``. Same constructor, same submodules and parameter names, so the
  evaluator's state-dict copy and the KernelBench seeding give it the reference's weights;
  nothing of the problem's file runs during a call.
- :func:`subclass_file` (compile, CUDA graphs, TF32, channels-last, the reference itself):
  the reference's ``Model`` copied whole as ``Reference`` and ``class ModelNew(Reference)``
  around its ``forward``: plain PyTorch, standing alone like the rewrites.

The ``forward`` of a graph rewrite is printed by ``fxsource.forward_source``.

Not covered: keyword-only or variadic ``forward`` parameters in :func:`forward_signature`
(they raise :class:`~solforge.search.fxsource.EmitError`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from solforge.search.fxsource import REFERENCE_CLS, EmitError


def forward_signature(model_cls: type) -> tuple[str, str]:
    """``("self, x, residual", "x, residual")`` for the reference's ``forward``."""
    try:
        sig = inspect.signature(model_cls.forward)
    except (TypeError, ValueError) as e:
        raise EmitError(f"the reference forward has no signature: {e}") from None
    params, call = [], []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
            raise EmitError("the reference forward takes *args, **kwargs or keyword-only "
                            "parameters")
        if p.default is p.empty:
            params.append(p.name)
        else:
            params.append(f"{p.name}={p.default!r}")
        call.append(p.name)
    if not call or call[0] != "self":
        raise EmitError("the reference forward is not a method")
    return ", ".join(params), ", ".join(call[1:])


@dataclass
class CopiedClass:
    """The reference's ``Model`` as source, without its ``forward``, renamed ``ModelNew``;
    and the module-level code it needs (imports, helpers, constants)."""

    imports: list[str]
    helpers: list[str]
    source: str


def copy_reference_class(path: Path, name: str = "Model", *, keep_forward: bool = False,
                         new_name: str = "ModelNew") -> CopiedClass:
    """Copy ``class Model`` as ``new_name`` (every member but ``forward``, unless
    ``keep_forward``) and, transitively, the module-level statements it names, in file
    order. ``SOLFORGE``, ``get_inputs`` and ``get_init_inputs`` are never copied."""
    src = Path(path).read_text()
    tree = ast.parse(src)
    lines = src.splitlines()
    defines: dict[str, list[ast.stmt]] = {}
    for stmt in tree.body:
        for n in _defined_names(stmt):
            defines.setdefault(n, []).append(stmt)
    cls = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == name), None)
    if cls is None:
        raise EmitError(f"{path}: no class {name}")
    members = [b for b in cls.body if keep_forward or not (isinstance(b, ast.FunctionDef)
                                                           and b.name == "forward")]
    wanted: list[ast.stmt] = []
    todo = [n for node in [*cls.bases, *cls.decorator_list, *members] for n in _used_names(node)]
    seen = {name, "SOLFORGE", "get_inputs", "get_init_inputs"}
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for stmt in defines.get(n, []):
            if stmt not in wanted:
                wanted.append(stmt)
                todo += _used_names(stmt)
    wanted.sort(key=lambda st: st.lineno)
    imports = [_segment(lines, st) for st in wanted if isinstance(st, (ast.Import, ast.ImportFrom))]
    helpers = [_segment(lines, st) for st in wanted
               if not isinstance(st, (ast.Import, ast.ImportFrom))]
    head = _first_line(cls)
    body = lines[head - 1:cls.end_lineno]
    for b in cls.body:
        if isinstance(b, ast.FunctionDef) and b.name == "forward" and not keep_forward:
            lo, hi = _first_line(b) - head, b.end_lineno - head + 1
            body = body[:lo] + body[hi:]
            break
    bases = ", ".join(ast.unparse(b) for b in cls.bases) or "object"
    body[cls.lineno - head] = re.sub(rf"^class {name}\b(\([^)]*\))?",
                                     f"class {new_name}({bases})", body[cls.lineno - head])
    while body and not body[-1].strip():
        body.pop()
    # KernelBench files spell `super(Model, self).__init__()`: keep that working renamed
    text = re.sub(rf"\bsuper\(\s*{name}\s*,", f"super({new_name},", "\n".join(body))
    return CopiedClass(imports=imports, helpers=helpers, source=text)


def copied_names(path: Path) -> set[str]:
    """Module-level names a standalone file copies from the reference (so imports of its
    own can avoid them)."""
    copied = copy_reference_class(path)
    names: set[str] = set()
    for code in [*copied.imports, *copied.helpers]:
        for stmt in ast.parse(code).body:
            names |= _defined_names(stmt)
    return names


def _first_line(node: ast.stmt) -> int:
    decos = getattr(node, "decorator_list", [])
    return min([node.lineno] + [d.lineno for d in decos])


def _segment(lines: list[str], stmt: ast.stmt) -> str:
    return "\n".join(lines[_first_line(stmt) - 1:stmt.end_lineno])


def _defined_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in stmt.names}
    if isinstance(stmt, ast.ImportFrom):
        return {a.asname or a.name for a in stmt.names}
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and
            isinstance(n.ctx, ast.Store)}


def _used_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and
            isinstance(n.ctx, ast.Load)]


# what a generated file may import from solforge: their code is part of what it computes
_LIBRARY_PATHS = ("kernels", "search/runtime.py")


@functools.lru_cache(maxsize=1)
def library_digest() -> str:
    """A digest of the solforge code generated files import (the Triton kernels and
    ``search/runtime.py``). A file that imports it names the digest, so a change to that
    code makes it a different file: a resumed run judges it anew instead of reusing the
    verdict of the old code (the search reuses verdicts by source, the run's cache by
    content)."""
    return digest_of(Path(__file__).resolve().parent.parent, _LIBRARY_PATHS)


def digest_of(root: Path, paths: tuple[str, ...]) -> str:
    """12 hex digits of sha256 over the ``.py`` files at ``paths`` under ``root`` (their
    paths and contents, in a fixed order)."""
    h = hashlib.sha256()
    for rel in paths:
        path = root / rel
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def _docstring(problem: str, candidate: str, summary: str, details: list[str],
               levers: list[str], imports: list[str]) -> str:
    doc = [f"{problem}: {summary}.", ""]
    doc += details
    if details:
        doc.append("")
    doc.append(f"Levers: {', '.join(levers) if levers else 'none (the reference as it is)'}.")
    doc.append(f"Generated by solforge's search agent (candidate `{candidate}`).")
    if any(i.startswith("from solforge.") for i in imports):
        doc.append(f"Built on solforge's kernels and runtime as of {library_digest()}.")
    return '"""' + "\n".join(doc).rstrip() + '\n"""'


def _import_block(imports: list[str]) -> list[str]:
    """``import x`` lines first, then ``from x import a, b`` merged per module."""
    plain = sorted({i for i in imports if i.startswith("import ")})
    names: dict[str, list[str]] = {}
    other = []
    for i in imports:
        m = re.fullmatch(r"from ([\w.]+) import ([\w, ]+)", i.strip())
        if m is None:
            if not i.startswith("import "):
                other.append(i)
            continue
        for n in m.group(2).split(","):
            if n.strip() and n.strip() not in names.setdefault(m.group(1), []):
                names[m.group(1)].append(n.strip())
    froms = [f"from {mod} import {', '.join(sorted(ns))}" for mod, ns in sorted(names.items())]
    return plain + froms + [o for o in dict.fromkeys(other)]


def subclass_file(*, problem: str, candidate: str, summary: str, details: list[str],
                  levers: list[str], reference_path: Path, imports: list[str],
                  body: str) -> str:
    """A file that carries a copy of the reference's ``Model`` (``forward`` included) as
    ``Reference``, and a ``ModelNew(Reference)`` around that forward: it stands alone (no
    import of the problem file, so exports run anywhere) and keeps the parameter names."""
    copied = copy_reference_class(reference_path, keep_forward=True, new_name=REFERENCE_CLS)
    lines = [_docstring(problem, candidate, summary, details, levers, imports), ""]
    lines += _import_block([*imports, *copied.imports])
    origin = Path(reference_path).name
    lines += ["", "", f"# the reference's Model, copied from {origin} (forward included)"]
    for h in copied.helpers:
        lines += ["", h]
    lines += ["", "", copied.source, "", "",
              f"class ModelNew({REFERENCE_CLS}):", textwrap.indent(body.rstrip(), "    ")]
    return "\n".join(lines).rstrip() + "\n"


def standalone_file(*, problem: str, candidate: str, summary: str, details: list[str],
                    levers: list[str], reference_path: Path, imports: list[str],
                    forward: str, decorators: list[str] = (),
                    prelude: list[str] = ()) -> str:
    """A file that needs nothing of the problem's: the reference's constructor copied
    (:func:`copy_reference_class`, so parameter names and initialisation are the same)
    and ``forward`` given here (decorated with ``decorators``); ``prelude``: lines put
    right after the imports."""
    copied = copy_reference_class(reference_path)
    lines = [_docstring(problem, candidate, summary, details, levers, imports), ""]
    lines += _import_block([*imports, *copied.imports])
    if prelude:
        lines += ["", *prelude]
    origin = Path(reference_path).name
    lines += ["", "", f"# the constructor and what it needs are the reference's ({origin}),",
              "# so parameters keep their names"]
    for h in copied.helpers:
        lines += ["", h]
    method = "\n".join([*(f"@{d}" for d in decorators), forward.rstrip()])
    lines += ["", "", copied.source, "", textwrap.indent(method, "    ")]
    return "\n".join(lines).rstrip() + "\n"


BASE_IMPORTS = ["import torch"]
