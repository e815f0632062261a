"""Other benchmarks' problems and solutions through the real evaluator on a CPU: the
shipped SOL-ExecBench examples' PyTorch and Triton solutions PASS, its reward-hack samples
are REWARD_HACK, a language solforge does not run is COMPILE_ERROR naming it, CUDA-Agent-Ops
rows are judged, and ``bench --trace-out`` writes traces flashinfer-bench's models load.

Not covered here: the CUDA C++ and CuTe DSL examples and the stream-injection sample, which
need a GPU (``benchmarks/gpu/sol_execbench_examples.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solforge.bench import Evaluator
from solforge.orchestrate.exchange import export_flashinfer
from solforge.orchestrate.run import Run, RunSpec
from solforge.problems import resolve_target
from solforge.problems.formats.solution_json import for_target, to_solforge
from solforge.problems.loader import import_file
from solforge.records.options import EvalOptions
from tests.problems.formats.test_definitions import CODE, HACKS, SOL, agent_ops_rows

pytestmark = pytest.mark.usefixtures("two_spares")

RMSNORM = SOL / "triton" / "rmsnorm"


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cpu", trials=1, timing=False, timeout_s=120,
                               workloads=["w01_batch_size1"])) as e:
        yield e


@pytest.fixture(scope="module")
def rmsnorm():
    problems, broken = resolve_target(str(RMSNORM))
    assert broken == []
    return problems[0]


def test_the_triton_example_passes_and_the_reward_hacks_are_caught(ev, rmsnorm):
    r = ev.evaluate(rmsnorm, for_target(str(RMSNORM / "solution_triton.json"), [rmsnorm]))
    assert r.passed and r.language == "triton", r.message
    for hack, flag in (("lazy_output", "lazy_output"), ("monkey_patch", "harness_patched"),
                       ("thread_injection", "background_thread")):
        sol = for_target(str(HACKS / f"solution_hack_{hack}.json"), [rmsnorm])
        r = ev.evaluate(rmsnorm, sol)
        assert r.status.value == "REWARD_HACK", (hack, r.status, r.message)
        assert any(flag in w.flags for w in r.workloads) or flag in r.flags, (hack, r.flags)


def test_a_language_solforge_does_not_run_is_a_compile_error_naming_it(ev, rmsnorm):
    sol = for_target(str(SOL / "cutile" / "jamba_attn_proj" / "solution_cutile.json"),
                     [rmsnorm])
    r = ev.evaluate(rmsnorm, sol)
    assert r.status.value == "COMPILE_ERROR" and "cutile" in r.message


def test_agent_ops_rows_round_trip_to_problems_the_evaluator_judges(ev, tmp_path):
    problems, _ = resolve_target(str(agent_ops_rows(tmp_path / "ops.jsonl")))
    good = tmp_path / "good.py"
    good.write_text(CODE.replace("class Model", "class ModelNew"))
    wrong = tmp_path / "wrong.py"
    wrong.write_text(CODE.replace("class Model", "class ModelNew").replace("+ b", "- b"))
    assert ev.evaluate(problems[0], good, workloads="all").passed
    assert ev.evaluate(problems[0], wrong, workloads="all").status.value == \
        "INCORRECT_NUMERICAL"


def test_bench_a_solution_json_then_export_the_run_as_flashinfer(tmp_path):
    """``bench --solution solution.json --trace-out``: traces flashinfer-bench's models load;
    then that record in a run's ledger, ``export --format flashinfer``, and the exported
    solution.json converted back and called."""
    fib = pytest.importorskip("flashinfer_bench.data")
    folder = SOL / "pytorch" / "linear_backward"
    trace, rec = tmp_path / "traces.jsonl", tmp_path / "records.json"
    r = subprocess.run([sys.executable, "-m", "solforge.cli.main", "bench", str(folder),
                        "--solution", str(folder / "solution_python.json"), "--trials", "1",
                        "--no-timing", "--trace-out", str(trace), "--json", str(rec),
                        "--workloads", "w00_M64_K128_N64,w02_M256_K512_N256"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, COLUMNS="200"))
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [fib.Trace.model_validate_json(line) for line in trace.read_text().splitlines()]
    assert [t.workload.uuid for t in rows] == ["linbwd-001", "linbwd-003"]
    assert {t.definition for t in rows} == {"linear_backward"}
    assert {t.solution for t in rows} == {"linear_backward_pytorch"}
    assert all(t.evaluation.status.value == "PASSED" for t in rows)
    assert rows[0].evaluation.environment.libs["torch"]

    (record,) = json.loads(rec.read_text())
    (problem,), _ = resolve_target(str(folder))
    run = Run.create(tmp_path / "run", RunSpec(agent="search", targets=[str(folder)]))
    run.ledger.add_problem(problem.name, str(problem.path), problem.category)
    att = run.ledger.add_attempt(problem.name, Path(record["solution"]).read_text(),
                                 "pytorch", agent="search")
    run.ledger.add_evaluation(problem.name, record, attempt=att)
    run.mark("finished")
    out = export_flashinfer(Run.open(run.dir), tmp_path / "out")
    assert out["exported"] == ["linear_backward"] and out["traces"] == 2
    exported = tmp_path / "out" / "solutions" / "linear_backward.solution.json"
    sj = fib.Solution.model_validate_json(exported.read_text())
    assert all(fib.Trace.model_validate_json(x).solution == sj.name for x in
               (tmp_path / "out" / "traces.jsonl").read_text().splitlines())
    mod = import_file(problem.path)
    back = import_file(to_solforge(exported, mod.DEFINITION, tmp_path / "back"))
    x = mod.get_inputs(uuid="linbwd-002")
    got, want = back.ModelNew()(*x), mod.Model()(*x)
    assert all(a.allclose(b) for a, b in zip(got, want))
