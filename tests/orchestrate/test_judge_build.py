"""Records say which judge code made them (``bench/judge/build.py``), and a resumed run
trusts only its own judge's: an older judge's record is judged again (the search's
``earlier``, the run cache), an attempt judged twice stands by its latest verdict, and the
summary says when verdicts of several judges are mixed. Real CPU evaluator, real ledgers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.bench.judge import build
from solforge.bench.judge.build import digest, judge_build, made_by_this_judge
from solforge.cli.runs import summary_line
from solforge.orchestrate.evalcache import CachedEvaluator
from solforge.orchestrate.run import Run, RunSpec
from solforge.problems import load_problem
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.records.options import EvalOptions
from solforge.search.config import SearchConfig
from solforge.search.state import SearchState
from tests.conftest import PROBLEMS

pytestmark = pytest.mark.usefixtures("two_spares")

RELU = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
'''
OLDER = "0123456789abcdef"


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=20,
                               timeout_s=120, trials=1, min_calls=3)) as e:
        yield e


@pytest.fixture
def setup(tmp_path):
    problem = load_problem(PROBLEMS / "kb_relu.py")
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    run.ledger.add_problem(problem.name, str(problem.path), problem.category)
    attempt = run.ledger.add_attempt(problem.name, RELU, "pytorch", agent="search",
                                     worker="search")
    run.solution_path(problem.name, attempt).write_text(RELU)
    return run, problem, attempt


def _older(record: EvaluationRecord, **changes) -> dict:
    """The record as an older judge would have stored it."""
    data = record.to_json() | changes
    data["versions"] = {**data["versions"], "solforge": OLDER}
    return data


def test_the_digest_covers_the_verdict_code_and_nothing_else(tmp_path):
    pkg = Path(build.__file__).resolve().parents[2]
    copy = tmp_path / "solforge"
    shutil.copytree(pkg, copy, ignore=shutil.ignore_patterns("__pycache__"))
    first = digest(copy)
    assert first == digest(copy) == judge_build() and len(first) == 16
    # the CLI and the agents do not change a verdict
    (copy / "cli" / "runs.py").write_text("# edited\n")
    (copy / "search" / "agent.py").write_text("# edited\n")
    assert digest(copy) == first
    # the timing, a library kernel and the knobs do
    for part in ("bench/measure/timing.py", "kernels/__init__.py", "env.py"):
        f = copy / part
        f.write_text(f.read_text() + "\n# edited\n")
        assert digest(copy) != first, part
        first = digest(copy)


def test_a_record_from_an_older_judge_is_judged_again_once(setup, ev):
    run, problem, attempt = setup
    path = run.solution_path(problem.name, attempt)
    rec = ev.evaluate(problem, path)
    assert rec.passed, rec.message
    assert rec.versions["solforge"] == judge_build() and made_by_this_judge(rec.to_json())
    # an older judge's record, with a figure this judge would not give
    run.ledger.add_evaluation(problem.name, _older(rec, speedup_vs_eager=9.0),
                              kind="visible", attempt=attempt)
    s = SearchState(run, problem, ev, SearchConfig(resume=True), None)
    assert s.earlier(attempt, "visible") is None
    assert s.earlier(attempt, "visible") is None
    events = run.ledger.events("rejudged")
    assert [(e["data"]["attempt"], e["data"]["scope"], e["data"]["judge"]) for e in events] \
        == [(attempt, "visible", OLDER)]
    again = s.evaluate(attempt, "visible")
    assert again.passed and again.speedup_vs_eager != 9.0
    # this judge's record is reused from now on
    assert s.earlier(attempt, "visible").to_json() == again.to_json()
    assert len(run.ledger.events("rejudged")) == 1


def test_the_run_cache_serves_only_this_judges_records(setup, ev, monkeypatch):
    run, problem, attempt = setup
    path = run.solution_path(problem.name, attempt)
    cached = CachedEvaluator(ev, run.ledger)
    first = cached.evaluate(problem, path)
    assert cached.evaluate(problem, path).to_json() == first.to_json()
    assert (cached.hits, cached.misses) == (1, 1)
    # the same run resumed by a solforge whose judge code differs
    monkeypatch.setattr("solforge.orchestrate.evalcache.judge_build", lambda: OLDER)
    cached.evaluate(problem, path)
    assert (cached.hits, cached.misses) == (1, 2)


def test_an_attempt_stands_by_its_latest_verdict_and_the_summary_names_older_judges(
        setup, ev):
    run, problem, attempt = setup
    led = run.ledger
    rec = ev.evaluate(problem, run.solution_path(problem.name, attempt))
    assert rec.passed
    # an older judge's final gave a higher figure; this judge's final, later, a lower one
    older = _older(rec, speedup_vs_eager=5.0, speedup_vs_compile=None)
    led.add_evaluation(problem.name, older, kind="final", attempt=attempt)
    assert led.best(problem.name)["record"]["versions"]["solforge"] == OLDER
    assert run.summary()["judge_builds"] == {OLDER: 1}
    assert "1 verdict(s) from an older solforge judge" in summary_line(run)
    now = rec.to_json() | {"speedup_vs_eager": 0.5, "speedup_vs_compile": None}
    latest = led.add_evaluation(problem.name, now, kind="final", attempt=attempt)
    assert led.best(problem.name)["id"] == latest
    assert run.summary()["judge_builds"] == {judge_build(): 1}
    assert "older solforge judge" not in summary_line(run)
    # a second problem whose verdict an older judge made, never reopened
    other = load_problem(PROBLEMS / "tiny_linear.py")
    led.add_problem(other.name, str(other.path), other.category)
    old_other = EvaluationRecord(problem=other.name, solution="x.py", status=Status.PASSED,
                                 speedup_vs_eager=1.2, versions={"solforge": OLDER})
    led.add_evaluation(other.name, old_other.to_json(), kind="final",
                       attempt=led.add_attempt(other.name, RELU, "pytorch", agent="search",
                                               worker="search"))
    assert run.summary()["judge_builds"] == {judge_build(): 1, OLDER: 1}
    assert "1 verdict(s) from an older solforge judge" in summary_line(run)
