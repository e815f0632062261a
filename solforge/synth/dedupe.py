"""Near-duplicates by AST similarity: a candidate too like a reference problem is dropped.

:func:`fingerprint` reads a module's code (not its docstrings, imports or ``SOLFORGE``
dict) as the sequence of its AST nodes with the names a writer chooses abstracted away:
local names, argument, function and class names become ``N``, constants their type. What
an API call says is kept: attribute names (``torch.relu``, ``.transpose``), keyword names
(``dim=``) and the module names ``torch``, ``nn``, ``F``. :func:`similarity` is difflib's
``SequenceMatcher`` ratio of two fingerprints; a candidate whose similarity to any
reference exceeds the threshold (0.9, as CUDA-Agent-Ops uses against KernelBench) is a
duplicate of it.

References are the built-in corpus (every registered corpus), KernelBench folders,
folders of earlier output (any ``*.py``), and the batch itself as it grows.

Not covered: semantic equivalence (``x * 2`` and ``x + x`` differ), and a reference whose
file does not parse (it is skipped, and :attr:`Deduper.skipped` lists it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path

THRESHOLD = 0.9
_KEPT_NAMES = frozenset({"torch", "nn", "F", "math", "self"})


def _is_doc(node: ast.AST) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def _is_meta(node: ast.AST) -> bool:
    return isinstance(node, (ast.Import, ast.ImportFrom)) or (
        isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "SOLFORGE" for t in node.targets))


def _tokens(node: ast.AST, out: list[str]) -> None:
    if _is_doc(node):
        return
    if isinstance(node, ast.Name):
        out.append(node.id if node.id in _KEPT_NAMES else "N")
        return
    if isinstance(node, ast.Constant):
        out.append(f"C:{type(node.value).__name__}")
        return
    if isinstance(node, ast.Attribute):
        _tokens(node.value, out)
        out.append("." + node.attr)
        return
    if isinstance(node, ast.keyword):
        out.append(f"{node.arg}=")
        _tokens(node.value, out)
        return
    if isinstance(node, (ast.Load, ast.Store, ast.Del)):
        return
    out.append(type(node).__name__)
    for child in ast.iter_child_nodes(node):
        _tokens(child, out)


def fingerprint(source: str) -> tuple[str, ...]:
    """The normalised node sequence of ``source``; SyntaxError if it does not parse."""
    tree = ast.parse(source)
    out: list[str] = []
    for node in tree.body:
        if not (_is_doc(node) or _is_meta(node)):
            _tokens(node, out)
    return tuple(out)


def similarity(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """SequenceMatcher's ratio of two fingerprints (1.0: the same)."""
    m = SequenceMatcher(None, a, b, autojunk=False)
    return m.ratio()


@dataclass
class Deduper:
    """The references so far; :meth:`match` finds a candidate's near-duplicate."""

    threshold: float = THRESHOLD
    references: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def add(self, label: str, source: str) -> None:
        try:
            self.references.append((label, fingerprint(source)))
        except SyntaxError as e:
            self.skipped.append((label, f"does not parse: {e}"))

    def add_files(self, files: list[Path]) -> None:
        for f in files:
            try:
                self.add(str(f), Path(f).read_text())
            except (OSError, UnicodeDecodeError) as e:
                self.skipped.append((str(f), str(e)))

    def match(self, fp: tuple[str, ...]) -> tuple[str, float] | None:
        """The first reference more similar than the threshold, with its similarity."""
        for label, ref in self.references:
            m = SequenceMatcher(None, fp, ref, autojunk=False)
            # the cheap upper bounds first: most pairs are rejected without the full ratio
            if m.real_quick_ratio() <= self.threshold or m.quick_ratio() <= self.threshold:
                continue
            r = m.ratio()
            if r > self.threshold:
                return label, r
        return None


def builtin_files() -> list[Path]:
    """Every problem file of the registered corpora (the built-in one and plug-ins')."""
    from solforge.problems.loader import corpora, problem_files

    return [f for d in corpora().values() for f in problem_files(d)]


def reference_files(folder: Path) -> list[Path]:
    """The problem files of ``folder``: a KernelBench layout's level files, else its
    ``*.py``; :class:`ValueError` naming the folder when it has none."""
    from solforge.problems.loader import problem_files

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--reference {folder}: not a directory (give a KernelBench "
                         "checkout, a level folder or a folder of problem files)")
    files = problem_files(folder)
    if not files:
        raise ValueError(f"--reference {folder}: no *.py problem files in it")
    return files
