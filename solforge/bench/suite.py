"""Benchmarking many problems with one evaluator: the loop behind ``solforge bench``.

Solutions are matched to problems by :func:`solution_for`: a file serves a single problem;
a directory holds ``<problem_name>.py`` files; ``reference`` uses each problem's own
``Model`` (a harness check and a baseline). Problems without a solution are skipped and
reported, problem files that fail to load are recorded as ``INVALID_REFERENCE``, and the
loop always goes on to the next problem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from solforge.bench.evaluator import Evaluator
from solforge.bench.judge.guard import EvaluatorTampered
from solforge.bench.judge.reference_solution import reference_solution
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.records.options import EvalOptions


class SuiteStopped(RuntimeError):
    """The suite cannot go on (the evaluator found its own files changed)."""


def solution_for(problem: Problem, solution: str, single: bool) -> Path | None:
    """The solution file for ``problem`` given the user's ``--solution`` argument."""
    if solution == "reference":
        return reference_solution(problem)
    p = Path(solution)
    if p.is_dir():
        candidate = p / f"{problem.name}.py"
        return candidate if candidate.is_file() else None
    if p.is_file():
        return p if single else (p if p.stem == problem.name else None)
    raise FileNotFoundError(f"--solution {solution}: no such file or directory "
                            "(give a .py file, a directory of <problem>.py files, or "
                            "'reference')")


def with_solutions(problems: list[Problem], solution: str) -> list[Problem]:
    """The problems that ``solution`` has a file for (all of them for 'reference' or a
    single file given for a single problem); raises FileNotFoundError like
    :func:`solution_for`."""
    single = len(problems) == 1
    return [p for p in problems if solution_for(p, solution, single) is not None]


def bench(problems: list[Problem], broken: Iterable[tuple[Path, str]], solution: str,
          options: EvalOptions, language: str | None = None,
          on_record: Callable[[EvaluationRecord], None] | None = None,
          on_skip: Callable[[Problem], None] | None = None) -> list[EvaluationRecord]:
    records: list[EvaluationRecord] = []
    for path, error in broken:
        rec = EvaluationRecord(problem=Path(path).stem, solution=solution,
                               device=options.device, status=Status.INVALID_REFERENCE,
                               message=error, policy=options.policy)
        records.append(rec)
        if on_record:
            on_record(rec)
    single = len(problems) == 1
    with Evaluator(options) as ev:
        for problem in problems:
            sol = solution_for(problem, solution, single)
            if sol is None:
                if on_skip:
                    on_skip(problem)
                continue
            try:
                rec = ev.evaluate(problem, sol, language)
            except EvaluatorTampered as e:
                # the evaluator can no longer trust its own code: nothing after this counts
                raise SuiteStopped(f"stopped before {problem.name}: {e}") from None
            records.append(rec)
            if on_record:
                on_record(rec)
    return records
