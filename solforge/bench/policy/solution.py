"""The solution noun: a ``.py`` file defining ``ModelNew``, and the language it is written in.

Languages live in one registry that built-ins and plug-ins share
(:func:`register_language`). Each says how to recognise it in a file's imports, whether
it runs on a CPU (every CPU runner runs Triton under its interpreter: ``runner/sandbox.py``),
whether it builds ahead of the GPU slot (CUDA C++ and CuTe DSL compile in a separate sandboxed build step
whose results are cached by content hash), and whether its point is kernels of the
solution's own (``own_kernels``: then handing the work back to PyTorch is a fallback that
the policy flags; for ``pytorch`` it is the language itself).

A file may state its language with a top-level ``LANGUAGE = "triton"``; otherwise the
imports decide: ``cutlass`` → cute_dsl, ``load_inline`` / ``solforge.kernels.cuda`` →
cuda_cpp, ``triton`` / ``solforge.kernels.triton`` (the kernel library) → triton, else
pytorch. Detection reads the source (AST); it never
runs it.

Not covered: multi-file solutions (a solution is one file; it may read files next to it).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Language:
    name: str
    detect: Callable[[set[str], str], bool]
    builds_ahead: bool = False
    runs_on_cpu: bool = True
    description: str = ""
    own_kernels: bool = False


_LANGUAGES: dict[str, Language] = {}
_ORDER: list[str] = []


def register_language(lang: Language, before: str | None = None) -> None:
    """Register a language; ``before`` places its detection ahead of another's."""
    _LANGUAGES[lang.name] = lang
    if lang.name in _ORDER:
        _ORDER.remove(lang.name)
    if before and before in _ORDER:
        _ORDER.insert(_ORDER.index(before), lang.name)
    else:
        _ORDER.append(lang.name)


def get_language(name: str) -> Language:
    try:
        return _LANGUAGES[name]
    except KeyError:
        raise ValueError(f"unknown language {name!r}; use one of: {', '.join(_ORDER)}") from None


def languages() -> list[str]:
    return list(_ORDER)


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names.add(a.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            for a in node.names:
                names.add(f"{node.module}.{a.name}")
    return names


def _has(imports: set[str], *prefixes: str) -> bool:
    return any(i == p or i.startswith(p + ".") for i in imports for p in prefixes)


register_language(Language(
    name="cute_dsl",
    detect=lambda imp, src: _has(imp, "cutlass"),
    builds_ahead=True, runs_on_cpu=False, own_kernels=True,
    description="NVIDIA CUTLASS Python DSL (CuTe); optional extra `solforge[cute]`",
))
register_language(Language(
    name="cuda_cpp",
    detect=lambda imp, src: _has(imp, "solforge.kernels.cuda")
    or any(i.endswith("load_inline") or i.endswith("cpp_extension") for i in imp)
    or "load_inline(" in src,
    builds_ahead=True, runs_on_cpu=False, own_kernels=True,
    description="CUDA C++ (inline PTX welcome) via NVRTC (solforge.kernels.cuda) or load_inline",
))
register_language(Language(
    name="triton",
    detect=lambda imp, src: _has(imp, "triton", "solforge.kernels.triton"),
    own_kernels=True,
    description="Triton; on a CPU it runs under the Triton interpreter",
))
register_language(Language(
    name="pytorch",
    detect=lambda imp, src: True,
    description="plain PyTorch (torch.compile, CUDA graphs, library calls)",
))


@dataclass(frozen=True)
class Solution:
    """A solution file, its language and its content hash."""

    path: Path
    language: str
    content_hash: str

    @property
    def name(self) -> str:
        return self.path.name


class SolutionError(ValueError):
    """A solution that cannot even be read; the message says what to fix."""


def detect_language(source: str) -> str:
    """The language a solution's source is written in (see module docstring)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "pytorch"
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "LANGUAGE" for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return get_language(node.value.value).name
    imports = _imports(tree)
    for name in _ORDER:
        if _LANGUAGES[name].detect(imports, source):
            return name
    return "pytorch"


def load_solution(path: str | Path, language: str | None = None) -> Solution:
    path = Path(path).resolve()
    if not path.is_file():
        raise SolutionError(f"{path}: no such solution file")
    if path.suffix != ".py":
        raise SolutionError(f"{path}: a solution is a .py file defining ModelNew")
    data = path.read_bytes()
    src = data.decode("utf-8", errors="replace")
    lang = get_language(language).name if language else detect_language(src)
    return Solution(path=path, language=lang, content_hash=hashlib.sha256(data).hexdigest()[:16])
