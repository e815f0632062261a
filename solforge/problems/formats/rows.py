"""CUDA-Agent-Ops rows and KernelBench level folders as solforge problem sets.

CUDA-Agent-Ops-6K (BytedTsinghua-SIA) is released as JSON lines whose ``code`` is a
KernelBench-format module (``Model``, ``get_inputs``, ``get_init_inputs``) composed from
the operators in ``ops``, with the row's ``data_source``. :func:`agent_ops` turns each row
into a problem file: the code unchanged, then a ``SOLFORGE`` dict (name
``cao_<row>_<ops>``, category ``cuda-agent-ops``, fp32, KernelBench's normal inputs, its
origin, CC-BY-4.0 as the dataset card gives). :func:`kernelbench` does the same for a
KernelBench checkout's level files (name ``kb_l<N>_<file>``, category ``L<N>``, MIT).

Duplicates are reported, never merged: a row or file whose code (blank lines and
comments aside) is that of an earlier one is listed with the one it repeats, and not
written.

The files written are no longer plain KernelBench files: index outputs the evaluator
infers for those (``compare.infer_index_outputs``) must be declared in their SOLFORGE.

Not covered: the dataset's download (give the jsonl file), rows whose code is not a
KernelBench module (reported as they fail to load), and columns other than those three.
"""

from __future__ import annotations

import hashlib
import io
import json
import pprint
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from solforge.problems.formats.solexec import write_atomic
from solforge.problems.spec import ProblemError

AGENT_OPS = "cuda-agent-ops"


@dataclass
class Converted:
    """What a conversion wrote, and what it did not: duplicates and unusable entries."""

    files: list[Path] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)   # (entry, the one it repeats)
    broken: list[tuple[str, str]] = field(default_factory=list)       # (entry, why)


def code_key(code: str) -> str:
    """A hash of ``code`` with comments, docstring-free blank lines and spacing removed."""
    try:
        toks = [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline)
                if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE,
                                  tokenize.INDENT, tokenize.DEDENT)]
        text = " ".join(toks)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = " ".join(code.split())
    return hashlib.sha256(text.encode()).hexdigest()


def _slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_")[:limit] or "op"


def _append(code: str, meta: dict) -> str:
    return code.rstrip() + "\n\n\nSOLFORGE = " + pprint.pformat(meta, sort_dicts=False,
                                                                 width=96) + "\n"


def agent_ops(path: Path, out_dir: Path, seen: dict[str, str] | None = None) -> Converted:
    """Each row of a CUDA-Agent-Ops jsonl as ``<out_dir>/cao_<row>_<ops>.py``."""
    seen = {} if seen is None else seen
    done = Converted()
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        raise ProblemError(f"{path}: no such file") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            done.broken.append((where, f"{where}: not valid JSON ({e}); one row a line"))
            continue
        code = row.get("code") if isinstance(row, dict) else None
        if not isinstance(code, str) or "class Model" not in code:
            done.broken.append((where, f"{where}: field 'code' must hold a KernelBench module "
                                       "(class Model, get_inputs, get_init_inputs)"))
            continue
        ops = row.get("ops")
        ops_text = ", ".join(map(str, ops)) if isinstance(ops, list) else str(ops or "")
        name = f"cao_{n:05d}_{_slug(ops_text)}"
        key = code_key(code)
        if key in seen:
            done.duplicates.append((where, seen[key]))
            continue
        seen[key] = where
        source = row.get("data_source", row.get("data source"))
        meta = {"name": name, "category": AGENT_OPS, "precision": "fp32",
                "distributions": ["normal", "signed"],
                "description": f"CUDA-Agent-Ops row {n}: {ops_text}".strip(),
                "origin": {"format": AGENT_OPS, "source_file": str(Path(path).resolve()),
                           "license": "CC-BY-4.0", "row": str(n), "ops": ops_text,
                           **({"data_source": str(source)} if source else {})}}
        target = out_dir / f"{name}.py"
        _write(target, _append(code, meta))
        done.files.append(target)
    return done


def _write(path: Path, text: str) -> None:
    if not (path.is_file() and path.read_text() == text):  # a judge may be importing it
        write_atomic(path, text)


def kernelbench(files: list[tuple[Path, int]], out_dir: Path,
                seen: dict[str, str] | None = None) -> Converted:
    """KernelBench level files (``(file, level)``, as ``loader.problem_files`` lists a
    checkout's) as ``<out_dir>/kb_l<N>_<file>.py``."""
    seen = {} if seen is None else seen
    done = Converted()
    out_dir.mkdir(parents=True, exist_ok=True)
    for f, level in files:
        code = f.read_text()
        key = code_key(code)
        if key in seen:
            done.duplicates.append((str(f), seen[key]))
            continue
        seen[key] = str(f)
        if re.search(r"^SOLFORGE\s*=", code, re.M):
            done.broken.append((str(f), f"{f}: already has a SOLFORGE dict; copy it as it is"))
            continue
        name = f"kb_l{level}_{f.stem}"
        meta = {"name": name, "category": f"L{level}", "precision": "fp32",
                "distributions": ["normal", "signed"],
                "origin": {"format": "kernelbench", "source_file": str(f.resolve()),
                           "license": "MIT"}}
        target = out_dir / f"{name}.py"
        _write(target, _append(code, meta))
        done.files.append(target)
    return done
