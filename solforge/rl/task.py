"""The RL task noun: a problem and the languages that count, and the text a policy reads.

A :class:`Task` is what a trainer's ``label`` / ``ground_truth`` carries: the problem's name
(a built-in or one the reward server was started with; never a path the caller picks on
the server) and the languages a solution must be written in. By default those are the
kernel languages (every registered language whose point is its own kernels: Triton, CUDA
C++, CuTe DSL): a PyTorch-only answer is not a kernel and fails the task.

:func:`problem_text` is the prompt: the protocol (``SKILL.md``, the contract with the
evaluator), the problem's facts (``prompts.task_message``: device, languages, policy,
tolerance, visible workloads), the reference with its held-out workloads removed
(``agents/visible.py``), the speed-of-light figures of the visible workloads when they were
measured (:func:`reference_figures`), and how to answer.

Not covered: tasks over several problems, per-task reward schemes (the server has one).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from solforge.agents import prompts
from solforge.agents.visible import write_visible_problem
from solforge.bench import languages as all_languages
from solforge.bench.policy.solution import get_language
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord

Mode = Literal["single", "tools"]


def kernel_languages() -> list[str]:
    """The registered languages whose point is kernels of the solution's own."""
    return [n for n in all_languages() if get_language(n).own_kernels]


class TaskError(ValueError):
    """A label or request naming no task this server or environment can run."""


class Task(BaseModel):
    """One problem and the languages that count for it."""

    model_config = {"extra": "forbid"}

    problem: str = Field(min_length=1, max_length=200, description="the problem's name")
    languages: list[str] | None = Field(None, description="languages that count (None: the "
                                        "kernel languages)")

    @field_validator("languages")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return None
        known = all_languages()
        bad = [x for x in v if x not in known]
        if bad or not v:
            raise ValueError(f"languages {bad or v}: use a non-empty list of "
                             f"{', '.join(known)}")
        return list(dict.fromkeys(v))

    def accepted(self) -> list[str]:
        return self.languages or kernel_languages()

    def label(self) -> str:
        """The JSON string trainers carry as a label / ground truth."""
        return json.dumps(self.model_dump(exclude_none=True), sort_keys=True)

    @classmethod
    def parse(cls, label: Any) -> Task:
        """A task from a label: a problem name, its JSON string, or a dict."""
        if isinstance(label, Task):
            return label
        data: Any = label
        if isinstance(label, str):
            text = label.strip()
            data = json.loads(text) if text.startswith("{") else {"problem": text}
        if not isinstance(data, dict):
            raise TaskError(f"a task label is a problem name or {{'problem': NAME, "
                            f"'languages': [...]}}, got {type(label).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "label"
            raise TaskError(f"task {where}: {first['msg']}") from None


class WorkloadFigures(BaseModel):
    """A visible workload's measured figures: the work, the speed of light, the baselines."""

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    flops: float | None = None
    bytes: float | None = None
    sol_ms: float | None = None
    bound: str | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None


def reference_figures(record: EvaluationRecord) -> list[WorkloadFigures]:
    """The figures of a reference evaluation's visible workloads."""
    return [WorkloadFigures(name=w.name, params=w.params, flops=w.flops, bytes=w.bytes,
                            sol_ms=w.sol_ms, bound=w.bound, eager_ms=w.eager_ms,
                            compile_ms=w.compile_ms)
            for w in record.workloads if w.visible]


def _g(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.4g}{unit}"


def visible_source(problem: Problem) -> str:
    """The problem file as a policy may see it: its held-out workloads removed."""
    with tempfile.TemporaryDirectory(prefix="solforge-visible-") as d:
        return write_visible_problem(problem, Path(d) / "problem.py").read_text()


_ANSWER = {
    "single": ("## How to answer\n\nThere are no tools in this turn. Answer with the complete "
               "solution file in one fenced ```python block defining `ModelNew` (the last "
               "such block counts). It is evaluated on every workload, held-out ones "
               "included, under the policy above."),
    "tools": ("## How to answer\n\nUse the tools; `problem.py` in the workspace is the "
              "reference below. `submit` ends the episode with the verdict on every "
              "workload, held-out ones included."),
}


def problem_text(problem: Problem, device: str, task: Task, policy: str = "strict",
                 figures: list[WorkloadFigures] | None = None, mode: Mode = "single",
                 protocol: str | Path | None = None) -> str:
    """The prompt of ``task`` on ``problem`` (see the module docstring)."""
    facts = prompts.task_message(problem, device, task.accepted(), policy, {})
    facts = facts.rsplit("\n\n", 1)[0]  # the workspace sentence is the worker's
    facts = "\n".join(x for x in facts.splitlines() if x.strip() != "Budgets:")
    parts = [prompts.protocol_text(protocol).rstrip(), "# The problem", facts,
             "## Reference (problem.py)", f"```python\n{visible_source(problem).rstrip()}\n```"]
    if figures:
        rows = [f"- {f.name} {json.dumps(f.params)}: {_g(f.flops)} FLOP, {_g(f.bytes)} B, "
                f"SOL {_g(f.sol_ms, ' ms')} ({f.bound or '-'}-bound), eager "
                f"{_g(f.eager_ms, ' ms')}, torch.compile {_g(f.compile_ms, ' ms')}"
                for f in figures]
        parts += [f"## Speed of light on {device} (visible workloads)", "\n".join(rows)]
    parts.append(_ANSWER[mode])
    return "\n\n".join(parts) + "\n"
