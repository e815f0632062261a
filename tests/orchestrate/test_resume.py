"""A run killed with SIGKILL in the middle of its work resumes without losing or redoing
finished evaluations. The run is the real `solforge optimize` in its own process group."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from solforge.orchestrate.run import Run
from tests.agents.conftest import GOOD
from tests.agents.loopback import Reply, Request, ScriptedServer
from tests.conftest import PROBLEMS


def brain(req: Request) -> Reply:
    outs = req.tool_outputs()
    if not outs:
        return Reply("Read.", [("read_file", {"path": "problem.py"})])
    if len(outs) == 1:
        return Reply("Write.", [("write_file", {"path": "solution.py", "content": GOOD})])
    if len(outs) == 2:
        return Reply("Check.", [("evaluate", {})])
    return Reply("Submit.", [("submit", {"path": "solution.py", "summary": "fused"})])


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "solforge.cli.main", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ, COLUMNS="200"))


def evaluations(run_dir: Path) -> list[tuple[str, str]]:
    if not (run_dir / "ledger.sqlite").exists():
        return []
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    try:
        return db.execute("SELECT kind, status FROM evaluations ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def wait_for_evaluation(proc: subprocess.Popen, run_dir: Path) -> None:
    deadline = time.time() + 240
    while time.time() < deadline and not evaluations(run_dir):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)


def test_sigkill_mid_run_then_resume_loses_nothing(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--agent", "llm", "--model", "test-model", "--api-key", "k", "--baselines",
              "eager", "--timeout", "120"]
    with ScriptedServer([brain] * 12) as s:
        proc = start(["optimize", str(PROBLEMS / "tiny_linear.py"), "--base-url", s.base_url,
                      "--run-dir", str(run_dir), *common])
        wait_for_evaluation(proc, run_dir)
        # the visible evaluation is recorded; the submit's full verdict starts now
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        before = evaluations(run_dir)
        assert before and before[0] == ("visible", "PASSED")
        assert Run.open(run_dir).status() == "interrupted"

        proc = start(["optimize", "--resume", str(run_dir), "--base-url", s.base_url,
                      *common])
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    after = evaluations(run_dir)
    # nothing lost, and the finished visible evaluation was not run again
    assert after[:len(before)] == before
    assert after.count(("visible", "PASSED")) == 1
    assert after.count(("full", "PASSED")) == 1
    run = Run.open(run_dir)
    assert run.status() == "finished"
    assert run.show()["problems"][0]["best"]["status"] == "PASSED"
    assert [w["state"] for w in run.ledger.work()] == ["failed", "done"]



def test_search_sigkill_mid_verdict_then_resume_measures_the_final_once(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--families", "reference", "--max-candidates", "1", "--baselines", "eager",
              "--timeout", "120", "--explore-max-calls", "12", "--budget-ms", "40"]
    proc = start(["optimize", str(PROBLEMS / "kb_relu.py"), "--run-dir", str(run_dir),
                  *common])
    wait_for_evaluation(proc, run_dir)
    # the visible evaluation is recorded; the final verdict starts now
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    before = evaluations(run_dir)
    assert before[0] == ("visible", "PASSED")
    # its output is a pipe: a line per change was written as it ran, not a live table
    # rendered only at the end, so the killed run leaves a log
    killed_log = proc.stdout.read()
    assert re.search(r"\d\d:\d\d:\d\d kb_relu: running, units 0", killed_log), killed_log

    proc = start(["optimize", "--resume", str(run_dir), *common])
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    after = evaluations(run_dir)
    assert after[:len(before)] == before
    # explored once, judged once: the final is the verdict (no "full" before it), and the
    # planner's own final verification has nothing left to re-measure
    assert after == [("visible", "PASSED"), ("final", "PASSED")]
    run = Run.open(run_dir)
    assert run.status() == "finished"
    (visible,) = run.ledger.evaluations(kind="visible")
    (final,) = run.ledger.evaluations(kind="final")
    # --explore-max-calls reached the exploring evaluation, not the final
    assert all(w["timed_calls"] <= 12 for w in visible["record"]["workloads"])
    assert all(w["timed_calls"] > 12 for w in final["record"]["workloads"])
    assert run.show()["problems"][0]["best"] == final["record"]
    # the evaluator's timing budget as given, in the run's spec (what the final used)
    assert json.loads((run_dir / "spec.json").read_text())["options"]["eval"][
        "budget_ms"] == 40.0
