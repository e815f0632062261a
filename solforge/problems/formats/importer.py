"""``solforge import SRC --out DIR``: any supported source written as plain problem files.

SRC is a SOL-ExecBench problem folder (or a folder of them), a FlashInfer-Bench dataset,
a CUDA-Agent-Ops ``.jsonl``, or a KernelBench checkout or level folder. Definitions whose
name an earlier one already has, and rows or files with the code of an earlier one, are
reported as duplicates and not written.

Not covered: merging into a folder that already holds problems of the same names (the
files are overwritten).
"""

from __future__ import annotations

from pathlib import Path

from solforge.problems.formats import rows, solexec
from solforge.problems.loader import kernelbench_level, kernelbench_levels, problem_files
from solforge.problems.spec import ProblemError


def import_source(src: Path, out: Path, holdout: float = 0.0) -> rows.Converted:
    """Convert ``src`` into problem files under ``out`` (see module docstring)."""
    src = Path(src)
    if src.is_file() and src.suffix == ".jsonl":
        return rows.agent_ops(src, out)
    if not src.is_dir():
        raise ProblemError(f"{src}: give a SOL-ExecBench problem folder, a FlashInfer-Bench "
                           "dataset, a CUDA-Agent-Ops .jsonl or a KernelBench checkout")
    defined = solexec.sources(src)
    if defined:
        done = rows.Converted()
        names: dict[str, str] = {}
        for s in defined:
            try:
                name, _ = solexec.render(s, holdout)
            except ProblemError as e:
                done.broken.append((str(s.definition), str(e)))
                continue
            if name in names:
                done.duplicates.append((str(s.definition), names[name]))
                continue
            names[name] = str(s.definition)
            done.files.append(solexec.convert(s, out, holdout))
        return done
    if kernelbench_levels(src):
        files = [(f, level) for f in problem_files(src)
                 if (level := kernelbench_level(f)) is not None]
        return rows.kernelbench(files, out)
    raise ProblemError(f"{src}: no definition.json, definitions/ folder or KernelBench level "
                       "folder here; nothing to import")
