"""A winner's last check on fresh seeds (``orchestrate/verify.py``): a candidate that is
right on the seeds it was judged on and wrong on most others is not reported, the next
best is checked and reported instead; the search agent's verdict takes fresh seeds too.
Real CPU evaluators, real ledgers."""

from __future__ import annotations

import pytest

from solforge.bench.measure import inputs as I
from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.orchestrate.run import Run, RunSpec
from solforge.orchestrate.verify import FRESH_SEEDS, final_verification, reverified
from solforge.problems import load_problem
from solforge.problems.loader import import_file
from solforge.search.state import SearchState
from solforge.search.config import SearchConfig

# one evaluation after another on one judge: the next runner starts during the current one
pytestmark = pytest.mark.usefixtures("two_spares")

PROBLEM = '''"""y = 2x + 1 on one small CPU workload, normal inputs only."""
import torch
import torch.nn as nn

from solforge.problems import gen

SOLFORGE = {
    "name": "affine_seeds",
    "precision": "fp32",
    "distributions": ["normal"],
    "workloads": [{"name": "small", "params": {"m": 4, "n": 8}, "cpu": True}],
}


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs(m: int = 4, n: int = 8):
    return [gen.randn(m, n)]


def get_init_inputs():
    return []
'''
HONEST = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.addcmul(torch.ones_like(x), x, torch.full_like(x, 2.0))
'''
# right only where the first element is below -1: one normal draw in six
FLAKY = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = x * 2 + 1
        return y if float(x[0, 0]) < -1.0 else y + 0.5
'''


def _options(**kw) -> EvalOptions:
    base = {"device": "cpu", "baselines": ["eager"], "budget_ms": 40, "timeout_s": 60,
            "trials": 1, "timing": False}
    return EvalOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("reverify")
    path = d / "affine_seeds.py"
    path.write_text(PROBLEM)
    problem = load_problem(path)
    module = import_file(path)
    params = problem.workloads[0].params
    # a seed whose first trial (its own seed) the flaky candidate gets right
    lucky = next(s for s in range(1, 10_000)
                 if float(I.make_inputs(module, params, s, "normal", "cpu")[0][0, 0]) < -1.0)
    return problem, lucky


@pytest.fixture(scope="module")
def ev():
    with Evaluator(_options()) as e:
        yield e


def _judged(run: Run, problem, ev: Evaluator, source: str, worker: str, seed: int):
    """An attempt and its passing ``full`` verdict on one seed, as an LLM worker's."""
    led = run.ledger
    attempt = led.add_attempt(problem.name, source, "pytorch", agent="llm", worker=worker)
    path = run.solution_path(problem.name, attempt)
    path.write_text(source)
    rec = ev.evaluate(problem, path, seed=seed)
    assert rec.status is Status.PASSED, rec.message
    led.add_evaluation(problem.name, rec.to_json(), kind="full", attempt=attempt)
    return attempt


def test_a_winner_wrong_on_fresh_seeds_is_not_reported(tmp_path, setup, ev):
    problem, lucky = setup
    run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
    led = run.ledger
    led.add_problem(problem.name, str(problem.path), problem.category)
    # untimed verdicts rank equal: the ledger takes the first, the flaky one
    flaky = _judged(run, problem, ev, FLAKY, "w1", lucky)
    honest = _judged(run, problem, ev, HONEST, "w2", lucky)
    assert led.best(problem.name)["attempt"] == flaky
    verified: list[str] = []
    n = final_verification(run, {problem.name: problem}, _options(seed=lucky), rounds=1,
                           on_verified=verified.append)
    assert n == 2 and verified == [problem.name]
    finals = {e["attempt"]: EvaluationRecord.from_json(e["record"])
              for e in led.evaluations(problem.name, kind="final")}
    assert finals[flaky].status is Status.INCORRECT_NUMERICAL
    assert "trial" in finals[flaky].message, finals[flaky].message
    assert finals[honest].passed and reverified(finals[honest])
    assert [w.trials for w in finals[honest].workloads] == [FRESH_SEEDS]
    best = led.best(problem.name)
    assert best["attempt"] == honest and best["kind"] == "final"
    rejected = led.events("winner_rejected")
    assert [(e["data"]["attempt"], e["data"]["next_attempt"]) for e in rejected] == \
        [(flaky, honest)]
    checks = led.events("final_verification")
    assert [e["data"]["trials"] for e in checks] == [FRESH_SEEDS, FRESH_SEEDS]
    assert all(e["data"]["seed"] != lucky for e in checks)
    # judged on enough fresh seeds: nothing left to check
    assert final_verification(run, {problem.name: problem}, _options(), rounds=1) == 0


def test_the_search_verdict_takes_fresh_seeds_and_an_older_final_is_judged_again(
        tmp_path, setup, ev):
    problem, lucky = setup
    run = Run.create(tmp_path / "run", RunSpec(agent="search"))
    led = run.ledger
    s = SearchState(run, problem, ev, SearchConfig(rounds=1), None)
    attempt = led.add_attempt(problem.name, FLAKY, "pytorch", agent="search", worker="search")
    run.solution_path(problem.name, attempt).write_text(FLAKY)
    # a passing final of an older version, on the one seed the flaky candidate gets right
    old = ev.evaluate(problem, run.solution_path(problem.name, attempt), seed=lucky)
    assert old.passed and not reverified(old)
    led.add_evaluation(problem.name, old.to_json(), kind="final", attempt=attempt)
    rec = s.verdict(attempt)
    assert rec.status is Status.INCORRECT_NUMERICAL, rec.message
    assert led.best(problem.name) is None  # its failed final excludes it
