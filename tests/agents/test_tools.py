"""The agent's tools: workspace confinement, file edits, argument checking, the contained
shell, profile and the language restriction (with a real CPU evaluator)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from solforge.agents.model import ToolCall
from solforge.agents.errors import ToolError
from solforge.agents.shell import run_contained
from solforge.agents.tools import SPECS, Toolbox, ToolConfig
from solforge.agents.workspace import Workspace
from solforge.records.evaluation import EvaluationRecord
from solforge.bench.runner.sandbox import capabilities
from solforge.problems import load_problem
from tests.agents.conftest import GOOD, TINY


class MemoryRecorder:
    """A Recorder that keeps attempts in memory (the ledger one is tested in test_worker)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.attempts: list[tuple[str, str, str]] = []
        self.evaluations: list[tuple[int, str, EvaluationRecord]] = []

    def attempt(self, source: str, path: str, reasoning: str) -> tuple[int, Path]:
        self.attempts.append((source, path, reasoning))
        frozen = self.root / f"attempt{len(self.attempts)}.py"
        frozen.write_text(source)
        return len(self.attempts), frozen

    def evaluation(self, attempt: int, kind: str, record: EvaluationRecord) -> None:
        self.evaluations.append((attempt, kind, record))


@pytest.fixture()
def ws(tmp_path) -> Workspace:
    w = Workspace(tmp_path / "ws")
    (w.root / "problem.py").write_text("class Model:\n    pass  # reference\n")
    return w


@pytest.fixture()
def toolbox(ws, evaluator, tmp_path) -> Toolbox:
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    return Toolbox(ws, load_problem(TINY), evaluator, MemoryRecorder(frozen),
                   ToolConfig(command_timeout_s=20))


def call(tb: Toolbox, name: str, args: dict | str = "{}", thought: str = "") -> str:
    import json

    text = args if isinstance(args, str) else json.dumps(args)
    return tb.call(ToolCall(name=name, arguments=text), thought=thought)


def test_tool_names_and_arguments_are_the_published_ones():
    got = {s.name: sorted(s.parameters["properties"]) for s in SPECS}
    assert got == {
        "read_file": ["path"], "write_file": ["content", "path"],
        "edit_file": ["new", "old", "path"], "list_files": ["pattern"],
        "grep": ["path", "pattern"], "run_command": ["command"], "evaluate": ["path"],
        "profile": ["path"], "submit": ["path", "summary"]}


def test_paths_stay_inside_the_workspace(ws, tmp_path):
    (tmp_path / "secret.txt").write_text("no")
    os.symlink(tmp_path / "secret.txt", ws.root / "link.txt")
    for bad in ("../secret.txt", str(tmp_path / "secret.txt"), "link.txt"):
        with pytest.raises(ToolError, match="outside the workspace"):
            ws.read_file(bad)


def test_file_tools(ws):
    assert "class Model" in ws.read_file("problem.py")
    assert ws.write_file(None, "a = 1\nb = 2\nb = 2\n").startswith("wrote")
    assert ws.read_file(None) == "a = 1\nb = 2\nb = 2\n"  # path defaults to solution.py
    assert "line 1" in ws.edit_file(None, "a = 1", "a = 3")
    with pytest.raises(ToolError, match="occurs 2 times"):
        ws.edit_file(None, "b = 2", "b = 4")
    with pytest.raises(ToolError, match="not found"):
        ws.edit_file(None, "zzz", "y")
    with pytest.raises(ToolError, match="no such file"):
        ws.read_file("nope.py")
    ws.write_file("sub/draft.py", "x = 1  # TODO\n")
    assert "sub/draft.py" in ws.list_files("**/*.py")
    assert ws.grep(r"TODO|reference") == ("problem.py:2:     pass  # reference\n"
                                          "sub/draft.py:1: x = 1  # TODO")
    with pytest.raises(ToolError, match="bad regular expression"):
        ws.grep("(")


def test_bad_calls_come_back_as_errors(toolbox):
    assert "not valid JSON" in call(toolbox, "write_file", '{"content": "x", ')
    assert "unexpected: paht" in call(toolbox, "read_file", {"paht": "problem.py"})
    assert "needs content" in call(toolbox, "write_file", {"path": "a.py"})
    assert "must be strings" in call(toolbox, "read_file", {"path": 3})
    assert "no tool named 'bash'" in call(toolbox, "bash", {"command": "ls"})
    assert call(toolbox, "evaluate", {"path": "missing.py"}).startswith("error: missing.py")


def test_run_command_is_contained(toolbox, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    out = call(toolbox, "run_command",
               {"command": "echo hello > f.txt; cat f.txt; env | grep -c API_KEY; exit 3"})
    assert out.startswith("exit code 3") and "hello" in out
    assert out.splitlines()[-1] == "0"  # no key in the command's environment
    assert (toolbox.ws.root / "f.txt").is_file()  # the workspace is its working directory
    if capabilities()["network_namespace"]:
        net = call(toolbox, "run_command", {"command": "python -c \"import socket; "
                   "socket.create_connection(('1.1.1.1', 80), timeout=3)\""})
        assert "Network is unreachable" in net or "OSError" in net


def test_run_command_timeout_kills_the_whole_group(tmp_path):
    marker = tmp_path / "survivor"
    t0 = time.monotonic()
    res = run_contained(f"(sleep 3; touch {marker}) & sleep 30", tmp_path, timeout_s=1)
    assert res.timed_out and res.exit_code is None
    assert time.monotonic() - t0 < 10
    time.sleep(3.5)
    assert not marker.exists()  # the background child died with the command
    flood = run_contained("yes | head -c 500000", tmp_path, max_output_chars=600)
    assert len(flood.output) < 1000 and "bytes of output" in flood.output


def test_a_command_runs_inside_its_slot_hold(tmp_path):
    """A command holds the device's slot while it runs; an evaluation it starts itself (an
    agent running `solforge bench` in its shell) is inside that hold and must not wait for
    it. Another process without the hold still waits."""
    probe = ("python -c \"from solforge.bench.measure.slots import device_slot\n"
             "with device_slot('cpu', timeout_s=3) as w: print('inside', w)\"")
    res = run_contained(probe, tmp_path, timeout_s=60)
    assert res.exit_code == 0 and "inside 0.0" in res.output, res.output
    alone = run_contained(probe, tmp_path, timeout_s=60, hold_slot=False)
    assert alone.exit_code == 0, alone.output  # nobody holds it: taken at once
    from solforge.bench.measure.slots import device_slot

    with device_slot("cpu"):  # held here, without telling the command: it must wait
        blocked = run_contained(probe, tmp_path, timeout_s=60, hold_slot=False)
    assert blocked.exit_code != 0 and "TimeoutError" in blocked.output, blocked.output


def test_profile_reports_operators(toolbox):
    toolbox.ws.write_file(None, GOOD)
    out = call(toolbox, "profile")
    assert "operator time per call" in out, out
    assert "aten::" in out


def test_language_restriction_is_enforced(toolbox):
    toolbox.config.languages = ["triton"]
    toolbox.ws.write_file(None, GOOD)
    out = call(toolbox, "evaluate", thought="plain PyTorch first")
    assert out.startswith("evaluate: COMPILE_ERROR"), out
    assert "accepts only triton" in out
    _, path, reasoning = toolbox.recorder.attempts[0]
    assert (path, reasoning) == ("solution.py", "plain PyTorch first")


def test_run_command_writes_nothing_outside_its_workspace(tmp_path):
    """The shell tool gets the runners' read-only filesystem view: the workspace is
    writable, the installed solforge is not."""
    if not capabilities()["fs_view"]:
        pytest.skip("this machine cannot give a read-only filesystem view (not root)")
    import solforge

    target = Path(solforge.__file__).parent / "_shell_was_here.py"
    try:
        res = run_contained(f"echo x > ws.txt; echo y > {target}", tmp_path, timeout_s=60)
        assert not target.exists(), res.output
    finally:
        target.unlink(missing_ok=True)
    assert (tmp_path / "ws.txt").read_text() == "x\n"
    assert "Read-only file system" in res.output and res.containment == "", res
