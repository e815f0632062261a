"""Quiet measurements (opt-in): another judge's runners stand still while this judge
measures, with real processes standing in for the other judge and its runner."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solforge.bench.runner import quiet
from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from tests.conftest import PROBLEMS, SOLUTIONS

DEVICE = "cuda:7"  # a registry of its own: nothing else in the tests uses it


def _state(pid: int, want: str | None = None, timeout_s: float = 3.0) -> str:
    """The process's state letter; with ``want``, polled until it shows (a signal is
    delivered asynchronously: right after kill() the state may not have changed yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if want is None or state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.02)


def _spawn(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def other_judge(tmp_path, monkeypatch):
    """A process playing another judge, and its runner (which has a child of its own)."""
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path))
    monkeypatch.setenv("SOLFORGE_SLOTS", str(tmp_path / "slots"))
    monkeypatch.setenv(quiet.ENV, "1")
    judge = _spawn("import time; time.sleep(120)")
    runner = _spawn("import subprocess, sys, time\n"
                    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
                    "time.sleep(120)")
    time.sleep(0.5)
    quiet.register(DEVICE, runner.pid, judge=judge.pid)
    yield judge, runner
    # the runner's child too: left behind, it stayed stopped for good after a run of the suite
    for pid in quiet.descendants(runner.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for p in (runner, judge):
        p.kill()
        p.wait()


def test_other_judges_runners_stop_during_a_quiet_measurement(other_judge):
    _, runner = other_judge
    child = quiet.descendants(runner.pid)
    assert child
    with quiet.hold_still(DEVICE) as stopped:
        assert stopped == 2
        assert _state(runner.pid, "T") == "T" and _state(child[0], "T") == "T"
    assert _state(runner.pid, "S") != "T" and _state(child[0], "S") != "T"


def test_a_runner_its_own_judge_froze_stays_frozen(other_judge):
    _, runner = other_judge
    with quiet.hold_still(DEVICE):
        quiet.mark_frozen(DEVICE, runner.pid, True)  # its judge froze it meanwhile
    time.sleep(0.3)  # a SIGCONT, had one been sent, would have landed by now
    assert _state(runner.pid, "T") == "T"
    quiet.mark_frozen(DEVICE, runner.pid, False)
    runner.send_signal(18)  # SIGCONT, as its judge would


def test_own_runners_gone_runners_and_the_switch(other_judge, monkeypatch):
    judge, runner = other_judge
    mine = _spawn("import time; time.sleep(120)")
    gone = _spawn("pass")
    gone.wait()
    try:
        quiet.register(DEVICE, mine.pid)  # this process is its judge
        quiet.register(DEVICE, gone.pid, judge=judge.pid)
        (quiet._registry(DEVICE) / str(gone.pid)).write_text(
            f'{{"pid": {gone.pid}, "start": 1, "judge": {judge.pid}}}')  # not that process
        with quiet.hold_still(DEVICE) as stopped:
            assert stopped == 2  # the other judge's runner and its child only
            assert _state(runner.pid, "T") == "T"
            assert _state(mine.pid) != "T"
        assert not (quiet._registry(DEVICE) / str(gone.pid)).exists()  # stale: removed
        monkeypatch.setenv(quiet.ENV, "0")
        assert _state(runner.pid, "S") != "T"  # continued when the first hold ended
        with quiet.hold_still(DEVICE) as stopped:
            assert stopped == 0 and _state(runner.pid) != "T"
    finally:
        mine.kill()
        mine.wait()


def test_an_evaluation_with_quiet_measurements_registers_and_cleans_up(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path))
    monkeypatch.setenv("SOLFORGE_SLOTS", str(tmp_path / "slots"))
    monkeypatch.setenv(quiet.ENV, "1")
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=50)) as ev:
        r = ev.evaluate(PROBLEMS / "tiny_linear.py", SOLUTIONS / "tiny_good_pytorch.py",
                        workloads=["small"])
        assert r.status is Status.PASSED, r.message
        assert any(f.name.isdigit() for f in quiet._registry("cpu").iterdir())  # spares
    # no live runner is left registered: the judge's runners unregister on closing, and
    # an entry left by an abrupt end (a killed judge) is found stale and removed
    deadline = time.monotonic() + 10
    while quiet._others("cpu") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert quiet._others("cpu") == []
    assert not [f for f in quiet._registry("cpu").iterdir() if f.name.isdigit()]
