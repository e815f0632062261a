"""A run's results in FlashInfer-Bench's and SOL-ExecBench's formats.

:func:`export_flashinfer` writes what ``Run.export`` writes (the best solution per problem,
its record, the reference) and beside it ``traces.jsonl`` (the best records as
FlashInfer-Trace records, ``records/flashinfer.py``) and ``solutions/<problem>.solution.json``
(each best solution as a solution.json either benchmark accepts,
``problems/formats/solution_json.py``).

Not covered: the run's other attempts (only each problem's best is exported), and the
definition JSON of a native solforge problem (its traces and solution name the problem).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from solforge.orchestrate.run import Run
from solforge.problems.formats.definition import Definition
from solforge.problems.formats.solution_json import from_solforge
from solforge.problems.loader import import_file
from solforge.records.evaluation import EvaluationRecord
from solforge.records.flashinfer import traces


def export_flashinfer(run: Run, out: Path) -> dict[str, Any]:
    """Export ``run`` to ``out`` with FlashInfer traces and solution.json files."""
    out = Path(out)
    result = run.export(out)
    rows: list[dict[str, Any]] = []
    for name in result["exported"]:
        record = EvaluationRecord.from_json(json.loads(
            (out / "records" / f"{name}.json").read_text()))
        solution = out / "solutions" / f"{name}.py"
        problem = out / "problems" / f"{name}.py"
        d = getattr(import_file(problem), "DEFINITION", None) if problem.is_file() else None
        sj = from_solforge(solution, d if isinstance(d, Definition) else None, name,
                           record.language)
        (out / "solutions" / f"{name}.solution.json").write_text(json.dumps(sj, indent=1))
        record.solution = sj["name"]
        rows += traces(record)
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in rows))
    return {**result, "traces": len(rows)}
