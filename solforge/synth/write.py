"""A batch on disk: one problem file per accepted candidate, their CUDA-Agent-Ops rows, and
the batch's report.

``OUT/<name>.py`` is the module followed by its ``SOLFORGE`` dict (``solforge problems list
OUT`` loads them); ``OUT/synth.jsonl`` holds one row per problem in CUDA-Agent-Ops' shape
(``ops``, ``data_source``, ``code``: the module without the SOLFORGE dict), which
``problems/formats/rows.py`` reads back; ``OUT/synth.report.json`` the counts per filter
reason. Nothing written depends on the clock, the machine or the paths given, so one seed
gives the same bytes everywhere.

Not covered: appending to an earlier batch (give it as ``--reference`` and write a new one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from solforge.problems.formats.solexec import write_atomic

JSONL = "synth.jsonl"
REPORT = "synth.report.json"
DATA_SOURCE = "solforge-synth"


@dataclass(frozen=True)
class Accepted:
    """One problem of the batch: its name, ops, module code and SOLFORGE dict."""

    name: str
    ops: tuple[str, ...]
    code: str
    problem_text: str
    origin: str = "catalogue"   # or "llm"


def prepare(out: Path, overwrite: bool) -> None:
    """Make ``out`` ready: new or empty; with ``overwrite`` an earlier batch's files (its
    ``synth_*.py``, jsonl and report) are removed first, anything else is left alone."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a directory")
    if out.is_dir():
        ours = [*out.glob("synth_*.py"), *(out / n for n in (JSONL, REPORT) if (out / n).exists())]
        if ours and not overwrite:
            raise ValueError(f"--out {out}: already holds a batch ({len(ours)} files); pass "
                             "--overwrite to replace it, or give an empty folder")
        for f in ours:
            f.unlink()
    out.mkdir(parents=True, exist_ok=True)


def write_batch(out: Path, accepted: list[Accepted], report: dict) -> list[Path]:
    """Write the problem files, the jsonl and the report; the problem files' paths back."""
    out = Path(out)
    files = []
    for a in accepted:
        path = out / f"{a.name}.py"
        write_atomic(path, a.problem_text)
        files.append(path)
    rows = [json.dumps({"ops": list(a.ops), "data_source": f"{DATA_SOURCE}:{a.origin}",
                        "code": a.code}, sort_keys=False) for a in accepted]
    write_atomic(out / JSONL, "".join(r + "\n" for r in rows))
    write_atomic(out / REPORT, json.dumps(report, indent=2, sort_keys=True) + "\n")
    return files
