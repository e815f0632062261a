"""The public command line, run as a user runs it: `python -m solforge.cli.main ...` in a
subprocess (a real console script entry, real files, real exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.agents.conftest import GOOD
from tests.agents.loopback import Reply, ScriptedServer
from tests.conftest import PROBLEMS, SOLUTIONS


def sf(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "solforge.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_problems_list_json_and_show():
    r = sf("problems", "list", "--json")
    assert r.returncode == 0, r.stderr
    problems = json.loads(r.stdout)
    assert len(problems) >= 40
    for p in problems:
        assert {"name", "category", "source", "workloads"} <= set(p)
    cats = {p["category"] for p in problems}
    assert {"L1", "L2", "quant", "attention"} <= cats
    l1 = json.loads(sf("problems", "list", "--category", "L1", "--json").stdout)
    assert l1 and all(p["category"] == "L1" for p in l1)
    r = sf("problems", "show", "rmsnorm_llama3")
    assert r.returncode == 0 and "Llama 3" in r.stdout and "prefill_8k_8b" in r.stdout


def test_bench_writes_records_and_summary(tmp_path):
    out = tmp_path / "records.json"
    r = sf("bench", str(PROBLEMS / "tiny_linear.py"), "--solution",
           str(SOLUTIONS / "tiny_good_pytorch.py"), "--baselines", "eager", "--budget-ms",
           "50", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED" in r.stdout
    (rec,) = json.loads(out.read_text())
    assert rec["schema"] == "solforge.evaluation/1" and rec["status"] == "PASSED"
    w = rec["workloads"][0]
    for key in ("name", "visible", "correct", "max_abs_error", "max_rel_error", "time_ms",
                "latency_ms", "eager_ms", "compile_ms", "speedup_vs_eager",
                "speedup_vs_compile"):
        assert key in w
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["schema"] == "solforge.summary/1" and summary["passed"] == 1


def test_bench_failure_exit_code_and_unknown_target(tmp_path):
    r = sf("bench", str(PROBLEMS / "tiny_linear.py"), "--solution",
           str(SOLUTIONS / "tiny_wrong_shape.py"), "--baselines", "eager")
    assert r.returncode == 1 and "INCORRECT_SHAPE" in r.stdout
    r = sf("bench", "no_such_problem", "--solution", str(SOLUTIONS / "tiny_good_pytorch.py"))
    assert r.returncode == 2 and "not a problem file" in r.stdout


def test_bench_directory_of_problems_records_broken_ones(tmp_path):
    d = tmp_path / "problems"
    d.mkdir()
    (d / "kb_relu.py").write_text((PROBLEMS / "kb_relu.py").read_text())
    (d / "broken.py").write_text("import torch\ndef get_inputs(:\n")
    out = tmp_path / "r.json"
    r = sf("bench", str(d), "--solution", "reference", "--baselines", "eager", "--json",
           str(out))
    recs = {x["problem"]: x["status"] for x in json.loads(out.read_text())}
    assert recs == {"broken": "INVALID_REFERENCE", "kb_relu": "PASSED"}, r.stdout
    assert r.returncode == 1


def _optimize_llm(tmp_path: Path, api: str) -> Path:
    """`solforge optimize --agent llm` over ``api`` against a scripted server: read, write,
    evaluate, submit. Returns the run directory."""
    def write(req):
        return Reply("Write it.", [("write_file", {"path": "solution.py", "content": GOOD})])

    script = [Reply("Read.", [("read_file", {"path": "problem.py"})]), write,
              Reply("Check.", [("evaluate", {})]),
              Reply("Done.", [("submit", {"path": "solution.py", "summary": "fused"})])]
    run_dir = tmp_path / "run"
    with ScriptedServer(script) as s:
        url = s.base_url if api == "openai" else s.root_url
        r = sf("optimize", str(PROBLEMS / "tiny_linear.py"), "--agent", "llm", "--model",
               "test-model", "--api", api, "--base-url", url, "--api-key", "k",
               "--run-dir", str(run_dir), "--baselines", "eager", "--budget-ms", "40",
               "--timeout", "120")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not s.errors and s.remaining == 0
    return run_dir


def _one_problem_solved(shown: dict) -> None:
    assert shown["status"] == "finished" and shown["evaluations"] >= 2
    (p,) = shown["problems"]
    assert p["name"] == "tiny_linear" and p["attempts"] == 1
    assert p["best"]["status"] == "PASSED" and p["best"]["held_out_included"]


def test_optimize_llm_then_runs_show_and_export(tmp_path):
    run_dir = _optimize_llm(tmp_path, "openai")
    _one_problem_solved(json.loads(sf("runs", "show", str(run_dir), "--json").stdout))
    out = tmp_path / "export"
    r = sf("export", str(run_dir), "--out", str(out))
    assert r.returncode == 0, r.stdout
    assert (out / "solutions" / "tiny_linear.py").read_text() == GOOD
    assert json.loads((out / "records" / "tiny_linear.json").read_text())["status"] == "PASSED"
    assert json.loads((out / "summary.json").read_text())["passed"] == 1
    assert Path(out / "problems" / "tiny_linear.py").is_file()


def test_optimize_llm_over_the_anthropic_api(tmp_path):
    from solforge.orchestrate.run import Run

    run_dir = _optimize_llm(tmp_path, "anthropic")
    # what `runs show --json` prints (the commands themselves: the openai run's test)
    _one_problem_solved(Run.open(run_dir).show())


def test_optimize_reopen_needs_resume_and_known_problems(tmp_path):
    from solforge.orchestrate.run import Run, RunSpec

    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--reopen", "kb_relu",
           "--run-dir", str(tmp_path / "new"))
    assert r.returncode == 2 and "--reopen goes with --resume" in r.stdout, r.stdout
    assert not (tmp_path / "new").exists()  # nothing started
    run = Run.create(tmp_path / "run", RunSpec(agent="search",
                                               targets=[str(PROBLEMS / "kb_relu.py")]))
    r = sf("optimize", "--resume", str(run.dir), "--reopen", "kb_relu,nope")
    assert r.returncode == 2, r.stdout
    assert "cannot reopen nope: not a problem of this run (its problems: kb_relu)" in r.stdout


RUN_TOML = """
[planner]
max_units = 2
[planner.budgets]
wall_s = 120
[search]
max_candidates = 1
families = ["reference"]
[eval]
trials = 3
timeout_s = 99
baselines = ["eager"]
"""


def test_optimize_config_file_with_flags_over_it(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(RUN_TOML)
    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--config", str(cfg), "--max-units",
           "4", "--timeout", "50", "--floor-s", "30", "--run-dir", str(tmp_path / "dry"),
           "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    used = json.loads(r.stdout)
    assert used["planner"]["max_units"] == 4            # typed: the flag wins
    assert used["planner"]["floor_s"] == 30
    assert used["eval"]["timeout_s"] == 50
    assert used["planner"]["budgets"]["wall_s"] == 120  # the file's
    assert used["search"]["max_candidates"] == 1 and used["search"]["families"] == ["reference"]
    assert used["eval"]["trials"] == 3
    assert used["planner"]["patience"] == 2             # neither: the flag's default
    assert used["problems"] == ["kb_relu"]
    assert not (tmp_path / "dry").exists()              # a dry run creates nothing
    # a real run records the settings it used
    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--config", str(cfg), "--run-dir",
           str(tmp_path / "run"))
    assert r.returncode == 0, r.stdout + r.stderr
    from solforge.orchestrate.run import Run

    run = Run.open(tmp_path / "run")
    options = run.spec.options
    assert options["config"] == str(cfg)
    assert options["planner"]["max_units"] == 2 and options["eval"]["trials"] == 3
    assert options["search"]["max_candidates"] == 1
    attempts = run.ledger.attempts("kb_relu")
    assert [a["path"] for a in attempts] == ["candidate:reference"]  # families, max 1
    record = run.ledger.evaluations("kb_relu", kind="visible")[0]["record"]
    assert {w["trials"] for w in record["workloads"]} == {3}  # [eval] trials
    # [eval] baselines: no compile baseline (its CPU warm-up alone took 13 s here)
    assert record["speedup_vs_compile"] is None and record["speedup_vs_eager"]


def test_optimize_config_file_errors_name_file_section_and_key(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[planner.budgets]\nwall_s = "soon"\n[search]\ngpu_secnds = 5\n'
                   '[llm]\nrole = "reviewer"\n[evaluation]\ntrials = 2\n')
    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--config", str(cfg), "--dry-run")
    assert r.returncode == 2, r.stdout
    out = " ".join(r.stdout.split())
    assert f"{cfg}:" in out
    assert "[planner.budgets] wall_s: Input should be a valid number" in out
    assert "[search] gpu_secnds: unknown key (known: worker, role, families" in out
    assert "[llm] role: set per unit, not here (use [planner] roles)" in out
    assert "[evaluation]: unknown section (known: planner, search, llm, eval)" in out
    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--config", str(tmp_path / "no.toml"))
    assert r.returncode == 2 and "no.toml: no such file (--config)" in r.stdout, r.stdout
    # the help names the tables (rich markup must not eat them)
    r = sf("optimize", "--help")
    text = " ".join(r.stdout.replace("│", " ").split())
    assert "[planner.budgets]" in text and "[eval] EvalOptions" in text, r.stdout


def test_optimize_config_file_llm_tables(tmp_path):
    cfg = tmp_path / "llm.toml"
    cfg.write_text('[llm.model]\nmodel = "local-coder"\nbase_url = "http://127.0.0.1:9/v1"\n'
                   'temperature = 0.2\n[llm.agent]\nstep_limit = 7\n')
    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--agent", "llm", "--config", str(cfg),
           "--max-cost", "2", "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    llm = json.loads(r.stdout)["llm"]
    assert llm["model"]["model"] == "local-coder" and llm["model"]["temperature"] == 0.2
    assert llm["model"]["base_url"] == "http://127.0.0.1:9/v1"
    assert "api_key" not in llm["model"]                     # the key is never recorded
    assert llm["agent"]["step_limit"] == 7                   # the file's
    assert llm["agent"]["cost_limit_usd"] == 2               # typed: the flag's
    assert llm["agent"]["time_limit_s"] == 3600              # neither: the flag's default
