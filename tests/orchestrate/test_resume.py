"""A run killed with SIGKILL in the middle of its work resumes without losing or redoing
finished evaluations. The run is the real `solforge optimize` in its own process group."""

from __future__ import annotations

import os
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


def test_sigkill_mid_run_then_resume_loses_nothing(tmp_path):
    run_dir = tmp_path / "run"
    common = ["--agent", "llm", "--model", "test-model", "--api-key", "k", "--baselines",
              "eager", "--timeout", "120"]
    with ScriptedServer([brain] * 12) as s:
        proc = start(["optimize", str(PROBLEMS / "tiny_linear.py"), "--base-url", s.base_url,
                      "--run-dir", str(run_dir), *common])
        deadline = time.time() + 240
        while time.time() < deadline and not evaluations(run_dir):
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.1)
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
