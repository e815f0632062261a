"""Find and load problems: built-in corpus, plug-in corpora, files and directories.

Problem files are imported as real modules from their own path (so ``inspect`` and
Triton-style tooling see real source). Importing a problem runs its top-level code: a
problem file is trusted like any code the user asked to run. The evaluator itself only
imports problems inside its worker processes; the CLI imports them to read metadata.

Corpora reach the loader through one registry: the built-in corpus registers itself
exactly as a plug-in does (a package exposing the ``solforge.corpora`` entry point with
a directory), see :func:`register_corpus`.

Not covered: problems fetched from the network; importers (KernelBench repositories,
SOL-ExecBench folders, ...) convert to files first.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from solforge.problems.spec import Problem, ProblemError, problem_from_module

BUILTIN_DIR = Path(__file__).parent / "corpus"
_CORPORA: dict[str, Path] = {}


def register_corpus(name: str, directory: Path) -> None:
    """Make every ``*.py`` problem under ``directory`` addressable by name."""
    _CORPORA[name] = Path(directory)


def corpora() -> dict[str, Path]:
    if not _CORPORA:
        register_corpus("builtin", BUILTIN_DIR)
        for ep in entry_points(group="solforge.corpora"):
            try:
                register_corpus(ep.name, Path(ep.load()()))
            except Exception as e:  # a broken plug-in must not hide the built-ins
                print(f"solforge: ignoring corpus plug-in {ep.name!r}: {e}", file=sys.stderr)
    return _CORPORA


def import_file(path: Path, prefix: str = "solforge_problem") -> ModuleType:
    """Import ``path`` as a fresh module with a unique name (never cached across files)."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    mod_name = f"{prefix}_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return module


def load_problem(path: str | Path, source: str | None = None) -> Problem:
    """Load one problem file; raise :class:`ProblemError` with what to fix."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ProblemError(f"{path}: no such problem file")
    try:
        module = import_file(path)
    except ProblemError:
        raise
    except BaseException as e:  # SyntaxError, ImportError, anything its top level raises
        raise ProblemError(f"{path}: importing the problem failed: {type(e).__name__}: {e}"
                           ) from None
    if source is None:
        source = "builtin" if _is_under(path, BUILTIN_DIR) else "file"
    problem = problem_from_module(module, path, source=source)
    if problem.kernelbench_plain and source == "file":
        problem = problem.model_copy(update={"source": "kernelbench"})
    return problem


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def problem_files(directory: Path) -> list[Path]:
    """Problem files under ``directory``: ``*.py`` not starting with ``_``, sorted."""
    return sorted(p for p in Path(directory).rglob("*.py") if not p.name.startswith("_"))


def builtin_problems(category: str | None = None) -> list[Problem]:
    """All problems of every registered corpus, optionally one category."""
    out: list[Problem] = []
    for name, directory in corpora().items():
        for f in problem_files(directory):
            p = load_problem(f, source="builtin" if name == "builtin" else name)
            if category is None or p.category.lower() == category.lower():
                out.append(p)
    return out


def find_builtin(name: str) -> Problem | None:
    for p in builtin_problems():
        if p.name == name:
            return p
    return None


def resolve_target(target: str) -> tuple[list[Problem], list[tuple[Path, str]]]:
    """Turn a CLI target into problems.

    ``target`` is a built-in problem name, a category (``L1``, ``attention``, ...), a
    problem file, a directory of problem files, ``all``, or a comma-separated list of
    these (their union, each problem once). Returns the problems that
    loaded and, for a directory, ``(path, error)`` for each file that did not, so a run
    can record them and go on. Raises :class:`ProblemError` when nothing matches.
    """
    if "," in target:  # several targets: their union, in the order given, each problem once
        seen: set[str] = set()
        loaded_all, broken_all = [], []
        for part in (t.strip() for t in target.split(",")):
            if not part:
                continue
            got, bad = resolve_target(part)
            loaded_all += [x for x in got if not (x.name in seen or seen.add(x.name))]
            broken_all += bad
        if not loaded_all and not broken_all:
            raise ProblemError(f"{target!r}: no targets in this comma-separated list")
        return loaded_all, broken_all
    p = Path(target)
    if p.is_file():
        return [load_problem(p)], []
    if p.is_dir():
        loaded, broken = [], []
        for f in problem_files(p):
            try:
                loaded.append(load_problem(f))
            except ProblemError as e:
                broken.append((f, str(e)))
        if not loaded and not broken:
            raise ProblemError(f"{p}: no problem files (*.py) in this directory")
        return loaded, broken
    everything = builtin_problems()
    if target.lower() == "all":
        return everything, []
    by_name = [x for x in everything if x.name == target]
    if by_name:
        return by_name, []
    by_cat = [x for x in everything if x.category.lower() == target.lower()]
    if by_cat:
        return by_cat, []
    cats = sorted({x.category for x in everything})
    raise ProblemError(
        f"{target!r} is not a problem file, a directory, a built-in problem or a category. "
        f"Categories: {', '.join(cats)}; list problems with `solforge problems list`.")
