"""The kernels the CI gate checks: each problem's kept solution, from an export
(``solutions/NAME.py`` with ``records/NAME.json`` and ``problems/NAME.py``) or from a run
(the ledger's ``best`` attempt of each problem, read-only).

A problem's reference is loaded from the first of: the export's ``problems/NAME.py``, the
path the run recorded, the built-in corpus by name.

Not covered: problems with no kept solution (nothing to gate; listed in ``missing``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from solforge.orchestrate.locate import Located
from solforge.orchestrate.run import Run
from solforge.problems.loader import find_builtin, load_problem
from solforge.problems.spec import Problem


@dataclass
class Kept:
    """One kept kernel and the problem it solves."""

    name: str
    source: str
    language: str
    problem: Problem

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


@dataclass
class KeptSet:
    kernels: list[Kept] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)   # name -> why not gated


def kept_kernels(located: Located) -> KeptSet:
    out = KeptSet()
    export = located.export_dir
    if located.run_dir is not None:
        run = Run.open(located.run_dir, readonly=True)
        for p in run.ledger.problems():
            best = run.ledger.best(p["name"])
            att = run.ledger.attempt(best["attempt"]) if best and best.get("attempt") else None
            if att is None:
                out.missing[p["name"]] = "no passing kept solution in the run"
                continue
            _add(out, p["name"], att["source"], att["language"] or "pytorch",
                 [export / "problems" / f"{p['name']}.py"] if export else [],
                 p.get("path") or "")
        return out
    assert export is not None
    for rec_path in sorted((export / "records").glob("*.json")):
        name = rec_path.stem
        sol = export / "solutions" / f"{name}.py"
        if not sol.is_file():
            out.missing[name] = f"{sol} is missing"
            continue
        try:
            language = json.loads(rec_path.read_text()).get("language") or "pytorch"
        except json.JSONDecodeError as e:
            out.missing[name] = f"{rec_path}: not JSON ({e})"
            continue
        _add(out, name, sol.read_text(), language, [export / "problems" / f"{name}.py"], "")
    return out


def _add(out: KeptSet, name: str, source: str, language: str, first: list[Path],
         recorded: str) -> None:
    for path in [*first, *([Path(recorded)] if recorded else [])]:
        if path.is_file():
            try:
                problem = load_problem(path)
            except Exception as e:  # noqa: BLE001 (importing the file runs its code: anything)
                out.missing[name] = f"{path}: the reference does not load ({e})"
                return
            out.kernels.append(Kept(name, source, language, problem))
            return
    problem = find_builtin(name)
    if problem is None:
        out.missing[name] = ("no reference found (not in the export's problems/, not at "
                             f"the recorded path {recorded or '-'}, not a built-in problem)")
        return
    out.kernels.append(Kept(name, source, language, problem))
