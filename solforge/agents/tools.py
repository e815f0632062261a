"""The agent's tools, by the names and arguments prompts are written against.

==============  =========================  =================================================
tool            arguments                  does
==============  =========================  =================================================
read_file       path                       a workspace file's text
write_file      path, content              write (create or replace) a workspace file
edit_file       path, old, new             replace one exact, unique occurrence of ``old``
list_files      pattern                    files matching a glob (``*``, ``**/*.py``)
grep            pattern, path              regex matches, ``file:line: text``
run_command     command                    a shell command in the workspace, contained
evaluate        path                       the evaluator on the visible workloads
profile         path                       per-kernel (GPU) / per-operator (CPU) time
submit          path, summary              the full verdict (held-out workloads included);
                                           ends the agent's work on the problem
==============  =========================  =================================================

``path`` defaults to ``solution.py``. ``evaluate`` and ``submit`` freeze the file's text as
an attempt (through a :class:`Recorder`: the worker writes the ledger) and evaluate that
copy; the agent's stated reasoning (its text beside the call, and ``summary``) goes with
it. ``run_command`` and ``profile`` take the device's timing slot, and ``evaluate`` /
``submit`` run in the evaluator, whose judge takes it for timing: no agent disturbs
another's measurement. Every failure comes back to the model as text starting with
``error:``; only ``submit`` ends the loop (by raising :class:`Submitted`).

Not covered: parallel tool execution (calls of one turn run in order), tools added by
plug-ins (subclass :class:`Toolbox` and extend ``_table``).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from solforge.agents.errors import FormatError, Submitted, ToolError
from solforge.agents.model import ToolCall, ToolSpec
from solforge.agents.report import evaluation_report, profile_report
from solforge.agents.shell import run_contained
from solforge.agents.workspace import SOLUTION_FILE, Workspace
from solforge.bench import Evaluator, SandboxConfig, device_slot
from solforge.problems.spec import Problem
from solforge.records import speedup_vs_best
from solforge.records.evaluation import EvaluationRecord


class ToolConfig(BaseModel):
    """Limits of the tools."""

    device: str = Field("cpu", description="the device commands and profiles may use")
    command_timeout_s: float = Field(300.0, description="run_command's wall-clock limit")
    max_output_chars: int = Field(12000, description="longest command output returned")
    max_read_chars: int = Field(60000, description="longest read_file returned")
    max_write_bytes: int = Field(1_000_000, description="largest file write_file writes")
    memory_mb: int = Field(16384, description="host memory limit of a command")
    languages: list[str] | None = Field(None, description="languages evaluations accept")
    ncu: bool = Field(True, description="add Nsight Compute figures to profile on a GPU")


class Recorder(Protocol):
    """Where attempts and their evaluations go (the worker writes them to the ledger)."""

    def attempt(self, source: str, path: str, reasoning: str) -> tuple[int, Path]:
        """Record ``source`` as an attempt (or find the same source recorded already);
        return its id and the frozen file to evaluate."""
        ...

    def evaluation(self, attempt: int, kind: str, record: EvaluationRecord) -> None:
        ...


@dataclass
class Best:
    """The best passing visible evaluation so far."""

    attempt: int
    path: Path
    record: EvaluationRecord
    score: float


_PATH = {"type": "string", "description": f"workspace path (default {SOLUTION_FILE})"}


def _spec(name: str, description: str, props: dict[str, Any], required: list[str]
          ) -> ToolSpec:
    return ToolSpec(name=name, description=description, parameters={
        "type": "object", "properties": props, "required": required,
        "additionalProperties": False})


SPECS: list[ToolSpec] = [
    _spec("read_file", "Read a workspace file (problem.py holds the reference).",
          {"path": _PATH}, []),
    _spec("write_file", "Write a workspace file, replacing it if it exists.",
          {"path": _PATH, "content": {"type": "string", "description": "the whole file"}},
          ["content"]),
    _spec("edit_file", "Replace one exact, unique occurrence of `old` by `new` in a file.",
          {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}},
          ["old", "new"]),
    _spec("list_files", "List workspace files matching a glob pattern (default '*').",
          {"pattern": {"type": "string"}}, []),
    _spec("grep", "Search workspace files for a regular expression.",
          {"pattern": {"type": "string"},
           "path": {"type": "string", "description": "file or directory (default: all)"}},
          ["pattern"]),
    _spec("run_command", "Run a shell command in the workspace (sandboxed: no network, "
          "time-limited, holds the GPU slot while it runs).",
          {"command": {"type": "string"}}, ["command"]),
    _spec("evaluate", "Check and time a solution on the visible workloads: status, "
          "errors, kernel time vs eager and torch.compile, SOL score, what to look at next.",
          {"path": _PATH}, []),
    _spec("profile", "Per-kernel (GPU) or per-operator (CPU) time of a solution.",
          {"path": _PATH}, []),
    _spec("submit", "Submit a solution for the final verdict on all workloads, held-out "
          "ones included. Ends your work on this problem: call it once, when done.",
          {"path": _PATH, "summary": {"type": "string", "description":
                                      "what the kernel does and why it is fast"}},
          ["summary"]),
]


class Toolbox:
    """Executes tool calls for one agent on one problem."""

    def __init__(self, workspace: Workspace, problem: Problem, evaluator: Evaluator,
                 recorder: Recorder, config: ToolConfig | None = None,
                 on_event: Callable[..., None] | None = None) -> None:
        self.ws = workspace
        self.problem = problem
        self.evaluator = evaluator
        self.recorder = recorder
        self.config = config or ToolConfig()
        self.on_event = on_event or (lambda kind, **data: None)
        self.best: Best | None = None
        self.evaluations = 0
        self._table: dict[str, Callable[..., str]] = {
            "read_file": self.ws.read_file, "write_file": self.ws.write_file,
            "edit_file": self.ws.edit_file, "list_files": self.ws.list_files,
            "grep": self.ws.grep, "run_command": self.run_command,
            "evaluate": self.evaluate, "profile": self.profile, "submit": self.submit,
        }
        self._specs = {s.name: s for s in SPECS if s.name in self._table}
        self._thought = ""

    def specs(self) -> list[ToolSpec]:
        return list(self._specs.values())

    # -- dispatch -------------------------------------------------------------------------
    def call(self, call: ToolCall, thought: str = "") -> str:
        """Run one tool call; its result text (``error: ...`` on failure). Raises only
        :class:`Submitted`."""
        self._thought = thought
        try:
            fn = self._table.get(call.name)
            if fn is None:
                raise FormatError(f"no tool named {call.name!r}; the tools are: "
                                  f"{', '.join(self._table)}")
            return fn(**self._arguments(call))
        except (FormatError, ToolError) as e:
            return f"error: {e}"
        except Submitted:
            raise
        except Exception as e:  # a bug of ours or an OS failure: the loop must go on
            self.on_event("tool_crash", tool=call.name, error=traceback.format_exc()[-2000:])
            return f"error: {call.name} failed inside solforge: {type(e).__name__}: {e}"

    def _arguments(self, call: ToolCall) -> dict[str, Any]:
        args = call.parsed()
        schema = self._specs[call.name].parameters
        allowed, required = schema["properties"], schema["required"]
        unknown = sorted(set(args) - set(allowed))
        if unknown:
            raise FormatError(f"{call.name} takes {', '.join(allowed) or 'no arguments'}; "
                              f"unexpected: {', '.join(unknown)}")
        missing = [k for k in required if args.get(k) is None]
        if missing:
            raise FormatError(f"{call.name} needs {', '.join(missing)}")
        bad = [k for k, v in args.items() if v is not None and not isinstance(v, str)]
        if bad:
            raise FormatError(f"{call.name}: {', '.join(bad)} must be strings")
        return {k: v for k, v in args.items() if v is not None}

    # -- contained execution ------------------------------------------------------------------
    def run_command(self, command: str) -> str:
        res = run_contained(command, self.ws.root, device=self.config.device,
                            timeout_s=self.config.command_timeout_s,
                            config=SandboxConfig(memory_mb=self.config.memory_mb),
                            max_output_chars=self.config.max_output_chars)
        self.on_event("command", command=command[:500], exit_code=res.exit_code,
                      seconds=round(res.seconds, 2), timed_out=res.timed_out)
        return res.describe()

    def profile(self, path: str | None = None) -> str:
        p = self._solution(path)
        # the judge does not take the slot for a profile; we hold it for the whole of it
        with device_slot(self.config.device):
            prof = self.evaluator.profile(self.problem, p, workloads="visible")
        ncu = None
        if self.config.ncu and self.config.device.startswith("cuda") and prof.get("ok"):
            from solforge.agents.ncu import ncu_summary

            ncu = ncu_summary(self.problem, p, self.ws.root, self.config.device,
                              timeout_s=self.config.command_timeout_s)
        return profile_report(prof, ncu)

    # -- evaluations ----------------------------------------------------------------------------
    def _solution(self, path: str | None) -> Path:
        p = self.ws.resolve(path)
        if not p.is_file():
            raise ToolError(f"{self.ws.rel(p)}: no such file; write your ModelNew to "
                            f"{SOLUTION_FILE} first")
        if p.suffix != ".py":
            raise ToolError(f"{self.ws.rel(p)}: a solution is a .py file defining ModelNew")
        return p

    def _run(self, p: Path, kind: str, reasoning: str, auto: bool = False
             ) -> tuple[int, Path, EvaluationRecord]:
        """Freeze ``p`` as an attempt, evaluate the frozen copy, record the evaluation."""
        label = self.ws.rel(p) if p.is_relative_to(self.ws.root) else str(p)
        attempt, frozen = self.recorder.attempt(p.read_text(errors="replace"), label,
                                                reasoning)
        overrides: dict[str, Any] = {"workloads": "visible" if kind == "visible" else "all"}
        if self.config.languages:
            overrides["languages"] = list(self.config.languages)
        record = self.evaluator.evaluate(self.problem, frozen, **overrides)
        self.evaluations += 1
        self.recorder.evaluation(attempt, kind, record)
        self.on_event("evaluation", scope=kind, attempt=attempt, status=record.status.value,
                      speedup_vs_eager=record.speedup_vs_eager, auto=auto)
        return attempt, frozen, record

    def evaluate(self, path: str | None = None) -> str:
        attempt, frozen, record = self._run(self._solution(path), "visible", self._thought)
        if record.passed:
            score = speedup_vs_best(record.to_json()) or 0.0
            if self.best is None or score > self.best.score:
                self.best = Best(attempt, frozen, record, score)
        best = f"; best so far: attempt {self.best.attempt}" if self.best else ""
        return f"{evaluation_report(record)}\n(attempt {attempt}{best})"

    def submit(self, summary: str, path: str | None = None) -> str:
        reasoning = "\n\n".join(x for x in (summary.strip(), self._thought.strip()) if x)
        attempt, _, record = self._run(self._solution(path), "full", reasoning)
        report = evaluation_report(record, title="verdict")
        raise Submitted(report, attempt=attempt, status=record.status.value,
                        speedup_vs_eager=record.speedup_vs_eager, sol_score=record.sol_score)

    def submit_best(self, reason: str) -> EvaluationRecord | None:
        """The full verdict on the best passing visible attempt (when the agent stopped
        without submitting); None when no attempt passed."""
        if self.best is None:
            return None
        return self._run(self.best.path, "full", reason, auto=True)[2]
