"""Find and load problems: built-in corpus, plug-in corpora, files and directories.

Problem files are imported as real modules from their own path (so ``inspect`` and
Triton-style tooling see real source). Importing a problem runs its top-level code: a
problem file is trusted like any code the user asked to run. The evaluator itself only
imports problems inside its worker processes; the CLI imports them to read metadata.

Corpora reach the loader through one registry: the built-in corpus registers itself
exactly as a plug-in does (a package exposing the ``solforge.corpora`` entry point with
a directory), see :func:`register_corpus`.

KernelBench is read in place: a checkout, its ``KernelBench/`` folder or one ``level<N>``
folder is a directory target whose problems are the level folders' files (scripts, sources
and results beside them are not problems), and a plain file ``level<N>/<number>_<Name>.py``
is named ``kb_l<N>_<number>_<Name>`` with category ``L<N>`` wherever it is loaded from, so
the CLI and the evaluator's worker, which loads the problem again by its path, agree.

A CUDA-Agent-Ops ``.jsonl`` is a target (its rows, ``formats/rows.py``), and a folder
holding SOL-ExecBench problem folders (``definition.json``, ``workload.jsonl``,
``reference.py``) or a FlashInfer-Bench dataset is a target too: each definition is
converted to a problem file first (``formats/solexec.py``) and loaded from there.

Not covered: problems fetched from the network; KernelBench level 4, whose files
import ``transformers`` and fetch model configs from the Hugging Face Hub when imported
(without ``transformers`` they are reported as files that failed to load).
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from solforge.problems.formats import rows, solexec
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
        hint = ""
        if isinstance(e, ModuleNotFoundError) and e.name:
            # a package the problem imports (KernelBench's Mamba2 files import einops); no
            # dependency of solforge's: the user installs it where the problems run
            top = e.name.split(".")[0]
            hint = (f"; the problem needs the package {top!r}, which this environment "
                    f"lacks: `pip install {top}` (or the package that provides the module "
                    f"{top!r}), here and wherever its candidates are evaluated")
        raise ProblemError(f"{path}: importing the problem failed: {type(e).__name__}: {e}"
                           f"{hint}") from None
    if source is None:
        source = "builtin" if _is_under(path, BUILTIN_DIR) else "file"
    problem = problem_from_module(module, path, source=source)
    if source == "file" and problem.origin.get("format"):
        problem = problem.model_copy(update={"source": problem.origin["format"]})
    if problem.kernelbench_plain:
        update: dict[str, str] = {"source": "kernelbench"} if source == "file" else {}
        level = kernelbench_level(path)
        if level is not None:  # file stems repeat across levels: the level makes them unique
            update |= {"name": f"kb_l{level}_{path.stem}", "category": f"L{level}",
                       "origin": {"format": "kernelbench", "source_file": str(path),
                                  "license": "MIT"}}
        if update:
            problem = problem.model_copy(update=update)
    return problem


_LEVEL_DIR = re.compile(r"level(\d+)")
_NUMBERED = re.compile(r"(\d+)_")


def kernelbench_level(path: Path) -> int | None:
    """N for a KernelBench file ``level<N>/<number>_<Name>.py``, else None."""
    m = _LEVEL_DIR.fullmatch(Path(path).parent.name)
    return int(m.group(1)) if m and _NUMBERED.match(Path(path).stem) else None


def _number(path: Path) -> int | None:
    m = _NUMBERED.match(path.stem)
    return int(m.group(1)) if m else None


def _is_level_dir(d: Path) -> bool:
    return (d.is_dir() and _LEVEL_DIR.fullmatch(d.name) is not None
            and any(_number(f) is not None for f in d.glob("*.py")))


def kernelbench_levels(directory: Path) -> list[Path]:
    """The level folders of a KernelBench layout at ``directory``: the folder itself when it
    is one, its ``level<N>`` children (the inner ``KernelBench/``), or those of its
    ``KernelBench/`` child (a checkout), in level order; ``[]`` for any other folder. A
    level folder is named ``level<N>`` and holds numbered files (``19_ReLU.py``)."""
    d = Path(directory)
    if _is_level_dir(d):
        return [d]
    for parent in (d, d / "KernelBench"):
        if parent.is_dir():
            levels = [c for c in parent.iterdir() if _is_level_dir(c)]
            if levels:
                return sorted(levels, key=lambda c: int(c.name[len("level"):]))
    return []


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def problem_files(directory: Path) -> list[Path]:
    """Problem files under ``directory``: ``*.py`` not starting with ``_``, sorted; for a
    KernelBench layout (:func:`kernelbench_levels`) only the level folders' files (not
    their subfolders), by level and then by number (``2_`` before ``10_``)."""
    levels = kernelbench_levels(directory)
    if not levels:
        return sorted(p for p in Path(directory).rglob("*.py") if not p.name.startswith("_"))
    out: list[Path] = []
    for d in levels:
        files = [p for p in d.glob("*.py") if not p.name.startswith("_")]
        out += sorted(files, key=lambda p: (_number(p) is None, _number(p) or 0, p.name))
    return out


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
    problem file, a directory of problem files (a KernelBench checkout, its
    ``KernelBench/`` folder or a ``level<N>`` folder among them, see :func:`problem_files`),
    ``DIR:N`` or ``DIR:N-M`` (the files under ``DIR`` whose names start with a number from
    N to M, in each level folder of a KernelBench layout), ``all``, or a comma-separated list
    of these (their union, each problem once). Returns the problems that loaded and, for a
    directory, ``(path, error)`` for each file that did not, or whose problem name an
    earlier file already has, so a run can record them and go on. Raises
    :class:`ProblemError` when nothing matches. A range is one span: ``DIR:1-3,DIR:7`` for
    more.
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
    if p.is_file() and p.suffix == ".jsonl":
        return _load_rows(p)
    if p.is_file():
        return [load_problem(p)], []
    if p.is_dir() and (defined := solexec.sources(p)):
        loaded, broken = _load_converted(defined)
        # problem files beside the definition folders (not their reference.py, kernel.py)
        homes = [s.definition.parent.resolve() for s in defined]
        others = [f for f in problem_files(p) if not any(
            _is_under(f, h) for h in homes) and not solexec.is_dataset_file(f, p)]
        if others:
            more, bad = _load_files(others)
            taken = {x.name for x in loaded}
            loaded += [x for x in more if x.name not in taken]
            broken += bad + [(x.path, f"{x.path}: problem name {x.name!r} is already that "
                              "of a definition here; give it another SOLFORGE['name']")
                             for x in more if x.name in taken]
        return loaded, broken
    if p.is_dir():
        files = problem_files(p)
        if not files:
            raise ProblemError(f"{p}: no problem files (*.py) in this directory")
        return _load_files(files)
    ranged = _RANGE.fullmatch(target)
    if ranged and Path(ranged["dir"]).is_dir():
        return _load_files(_numbered_files(Path(ranged["dir"]), ranged["lo"], ranged["hi"]))
    if ranged:
        raise ProblemError(f"{target}: {ranged['dir']!r} is not a directory (DIR:N-M selects "
                           "the numbered problem files of a directory)")
    if p.suffix == ".py" or "/" in target:  # a path, never a built-in name: say so
        raise ProblemError(f"{target}: no such problem file or directory")
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


_RANGE = re.compile(r"(?P<dir>.+):(?P<lo>\d+)(?:-(?P<hi>\d+))?")


def _numbered_files(directory: Path, lo: str, hi: str | None) -> list[Path]:
    """The problem files of ``directory`` numbered from ``lo`` to ``hi`` (``lo`` alone)."""
    first, last = int(lo), int(hi if hi is not None else lo)
    span = f"{first}-{last}" if hi is not None else str(first)
    if first > last:
        raise ProblemError(f"{directory}:{span}: an empty range; write N-M with N <= M")
    numbered = [f for f in problem_files(directory) if _number(f) is not None]
    chosen = [f for f in numbered if first <= (_number(f) or 0) <= last]
    if not chosen:
        have = sorted({n for f in numbered if (n := _number(f)) is not None})
        has = f"its files are numbered {have[0]} to {have[-1]}" if have else \
            "none of its files has a name starting with a number (19_ReLU.py)"
        raise ProblemError(f"{directory}:{span}: no problem file numbered {span}; {has}")
    return chosen


def _load_files(files: list[Path]) -> tuple[list[Problem], list[tuple[Path, str]]]:
    """Load each file; a failure or a name already taken is reported and the rest load."""
    loaded: list[Problem] = []
    broken: list[tuple[Path, str]] = []
    by_name: dict[str, Path] = {}
    for f in files:
        try:
            problem = load_problem(f)
        except ProblemError as e:
            broken.append((f, str(e)))
            continue
        if problem.name in by_name:  # solutions, records and runs are keyed by the name
            broken.append((f, f"{f}: problem name {problem.name!r} is already that of "
                              f"{by_name[problem.name]}; give one of them another "
                              "SOLFORGE['name']"))
            continue
        by_name[problem.name] = f
        loaded.append(problem)
    return loaded, broken


def _load_converted(defined: list[solexec.Source]) -> tuple[list[Problem], list[tuple[Path, str]]]:
    """SOL-ExecBench folders / a FlashInfer-Bench dataset: each definition converted to a
    problem file (``formats/solexec.py``) and loaded; one that does not convert or load is
    reported by its definition file and the rest load."""
    files: list[Path] = []
    broken: list[tuple[Path, str]] = []
    for src in defined:
        try:
            files.append(solexec.convert(src, solexec.converted_dir(src)))
        except ProblemError as e:
            broken.append((src.definition, str(e)))
    loaded, more = _load_files(files)
    return loaded, broken + more


def _load_rows(path: Path) -> tuple[list[Problem], list[tuple[Path, str]]]:
    """A CUDA-Agent-Ops jsonl: its rows converted (``formats/rows.py``) and loaded; a
    duplicate row is reported with the row it repeats."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    done = rows.agent_ops(path, Path(tempfile.gettempdir()) / "solforge-converted" / digest)
    loaded, broken = _load_files(done.files)
    dups = [(path, f"{row}: the same code as {first}; not loaded twice")
            for row, first in done.duplicates]
    return loaded, [(path, why) for _, why in done.broken] + dups + broken
