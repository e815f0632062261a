"""A search's ranking and its fallback once the compile baseline's own program has failed
its trials: records measured before that still held candidates to the compile figure.
KernelBench's ``93_masked_cumsum`` on an H100 (session 30) kept CUDA graphs at 0.58x of
eager: the reference, surveyed at 0.39x of a compile figure whose program then failed,
ranked below them, and the fallback looked for the failed compile program."""

from __future__ import annotations

from pathlib import Path

from solforge.orchestrate.run import Run, RunSpec
from solforge.problems import load_problem
from solforge.records import speedup_vs_best
from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult
from solforge.search.agent import faster_baseline_program
from solforge.search.config import SearchConfig
from solforge.search.state import SearchState

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"


def _record(time_ms: float, eager_ms: float = 8.7, compile_ms: float = 3.4,
            within: bool = True, status: Status = Status.PASSED) -> EvaluationRecord:
    return EvaluationRecord(
        problem="p", solution="s.py", status=status,
        speedup_vs_eager=eager_ms / time_ms, speedup_vs_compile=compile_ms / time_ms,
        workloads=[WorkloadResult(name="default", status=status, time_ms=time_ms,
                                  eager_ms=eager_ms, compile_ms=compile_ms,
                                  compile_within_tolerance=within)])


def test_records_measured_before_the_compile_program_failed_rank_against_eager(tmp_path):
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    problem = load_problem(PROBLEMS / "kb_relu.py")
    s = SearchState(run, problem, evaluator=None, config=SearchConfig(),  # type: ignore[arg-type]
                    on_event=None)
    reference, graphs = _record(8.7), _record(15.0, within=False)
    assert s.score(reference) < s.score(graphs)  # the bug: 0.39 against 0.58
    assert s.score(reference) == speedup_vs_best(reference) == 3.4 / 8.7
    s.compile_failed(EvaluationRecord(
        problem="p", solution="compile.py", status=Status.INCORRECT_NUMERICAL,
        workloads=[WorkloadResult(name="default", status=Status.INCORRECT_NUMERICAL,
                                  message="trial 2 (signed inputs): outside")]))
    assert s.score(reference) == 1.0 and s.score(graphs) == 8.7 / 15.0
    assert s.score(reference) > s.score(graphs)
    # the record itself is not changed, and a failed record still ranks last
    assert reference.workloads[0].compile_within_tolerance is True
    assert s.score(_record(1.0, status=Status.INCORRECT_NUMERICAL)) == -1.0
    # a workload the failure did not name keeps its compile figure
    other = _record(8.7)
    other.workloads[0].name = "big"
    assert s.score(other) == 3.4 / 8.7


def test_the_fallback_is_the_reference_where_the_compile_figure_does_not_count():
    assert faster_baseline_program(_record(15.0)) == "compile"
    assert faster_baseline_program(_record(15.0, within=False)) == "reference"
    assert faster_baseline_program(_record(15.0, eager_ms=3.0)) == "reference"
    mixed = _record(15.0)
    mixed.workloads.append(WorkloadResult(name="b", status=Status.PASSED, time_ms=1.0,
                                          eager_ms=2.0, compile_ms=1.0,
                                          compile_within_tolerance=False))
    assert faster_baseline_program(mixed) == "reference"
