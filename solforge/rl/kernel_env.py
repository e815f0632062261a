"""``KernelEnv``: one problem as a gymnasium environment, played with the worker's tools.

``reset(seed=..., options={"problem": NAME, "languages": [...]})`` starts an episode in a
fresh workspace (``problem.py`` without its held-out workloads, as the LLM worker gets it)
and returns the problem text (``task.problem_text``: protocol, facts, reference, SOL
figures) as the observation. ``step(action)`` takes

- a string: a whole solution (or a completion holding one in a ```python block); it is
  written to ``solution.py`` and submitted;
- a dict ``{"tool": NAME, "arguments": {...}}`` (or ``{"name": ..., "arguments": ...}``,
  arguments as a dict or its JSON text), or a :class:`~solforge.agents.model.ToolCall`:
  one call of the worker's tools (``agents/tools.py``: read/write/edit files, grep,
  run_command, evaluate, profile, submit).

The observation is the tool's text exactly as the LLM worker reads it (``evaluate``: the
visible workloads' report), except the verdict of a submit, which shows its visible part
(``feedback.py``). The reward is 0 until the episode ends; ``terminated`` comes with the
submit's verdict and its reward (``reward.py``: held-out workloads included, strict policy,
the task's languages). ``truncated`` comes when a budget is spent (steps, evaluations,
seconds); the best passing visible attempt then gets the verdict and its reward, as the
worker's ``submit_best_on_exit`` does, else the failure reward.

A seed fixes the problem drawn when ``options`` names none and the correctness trials'
inputs of every evaluation in the episode, so the same seed and the same actions give the
same statuses (timings still vary: they are measurements).

Not covered: vectorised environments (run one per process; each owns a judge), rendering,
tokens or cost budgets (the trainer counts those).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
from gymnasium import spaces
from pydantic import BaseModel, Field

from solforge.agents.errors import Submitted
from solforge.agents.model import ToolCall
from solforge.agents.tools import Toolbox, ToolConfig
from solforge.agents.workspace import PROBLEM_FILE, SOLUTION_FILE, Workspace
from solforge.bench import Evaluator
from solforge.bench.judge.reference_solution import reference_solution
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord
from solforge.records.options import EvalOptions
from solforge.rl.extract import extract_solution
from solforge.rl.feedback import visible_feedback
from solforge.rl.reward import Reward, RewardConfig, reward_of
from solforge.rl.task import Task, WorkloadFigures, problem_text, reference_figures

_TEXT = spaces.Text(max_length=4_000_000, charset="".join(chr(i) for i in range(32, 127))
                    + "\n\t")


class EnvConfig(BaseModel):
    """Budgets and settings of an episode."""

    policy: Literal["strict", "default"] = Field("strict", description="the evaluations' policy (strict: a flagged "
                        "fallback is a REWARD_HACK); replaces the options' own")
    max_steps: int = Field(40, ge=1, description="tool calls per episode")
    max_evaluations: int = Field(12, ge=1, description="evaluate/submit calls per episode")
    time_limit_s: float = Field(3600.0, gt=0, description="wall seconds per episode")
    figures: bool = Field(True, description="measure the reference's SOL figures at reset "
                          "(one visible evaluation per problem, kept for the env's life)")
    judge_best_on_truncate: bool = Field(True, description="a truncated episode's best "
                                         "visible attempt gets the verdict and its reward")
    tools: ToolConfig = Field(default_factory=ToolConfig)
    workdir: Path | None = Field(None, description="where episode workspaces go (None: a "
                                 "temporary directory removed on close)")


class _Attempts:
    """The toolbox's Recorder for one episode: frozen sources, the last verdict."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.by_source: dict[str, int] = {}
        self.verdict: EvaluationRecord | None = None

    def attempt(self, source: str, path: str, reasoning: str) -> tuple[int, Path]:
        n = self.by_source.setdefault(source, len(self.by_source) + 1)
        frozen = self.root / f"attempt{n}.py"
        if not frozen.exists():
            frozen.write_text(source)
        return n, frozen

    def evaluation(self, attempt: int, kind: str, record: EvaluationRecord) -> None:
        if kind == "full":
            self.verdict = record


def parse_action(action: Any) -> ToolCall | str:
    """A tool call, or the source of a whole solution (see the module docstring)."""
    if isinstance(action, ToolCall):
        return action
    if isinstance(action, str):
        return action
    if isinstance(action, dict):
        name = action.get("tool", action.get("name"))
        args = action.get("arguments", {})
        if not isinstance(name, str):
            raise ValueError("a tool action is {'tool': NAME, 'arguments': {...}}")
        return ToolCall(name=name, arguments=args if isinstance(args, str) else json.dumps(args))
    raise ValueError(f"an action is a solution's text or a tool call, got {type(action).__name__}")


class KernelEnv(gym.Env):
    """Problems as episodes of tool calls ending in a verdict (see the module docstring)."""

    metadata = {"render_modes": []}
    observation_space = _TEXT
    action_space = _TEXT  # also dicts (tool calls): see parse_action

    def __init__(self, problems: list[Problem], options: EvalOptions | None = None,
                 reward: RewardConfig | None = None, config: EnvConfig | None = None,
                 evaluator: Evaluator | None = None) -> None:
        if not problems:
            raise ValueError("KernelEnv needs at least one problem")
        self.problems = {p.name: p for p in problems}
        self.config = config or EnvConfig()
        self.options = (options or EvalOptions()).model_copy(
            update={"policy": self.config.policy})
        self.reward_config = reward or RewardConfig()
        self.evaluator = evaluator or Evaluator(self.options)
        self._own_evaluator = evaluator is None
        self._root = Path(self.config.workdir) if self.config.workdir else \
            Path(tempfile.mkdtemp(prefix="solforge-env-"))
        self._figures: dict[str, list[WorkloadFigures]] = {}
        self._episode = 0
        self.toolbox: Toolbox | None = None
        self.task: Task | None = None
        self._attempts: _Attempts | None = None
        self._steps = 0
        self._started = 0.0
        self._done = True

    # -- episode --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        opts = dict(options or {})
        if "problem" in opts:
            task = Task.parse({k: v for k, v in opts.items() if k in ("problem", "languages")})
        else:
            names = sorted(self.problems)
            task = Task(problem=names[int(self.np_random.integers(len(names)))],
                        languages=opts.get("languages"))
        if task.problem not in self.problems:
            raise ValueError(f"problem {task.problem!r} is not one of this env's: "
                             f"{', '.join(sorted(self.problems))}")
        problem = self.problems[task.problem]
        # the trials' inputs follow the episode's seed (gymnasium's generator)
        trial_seed = int(self.np_random.integers(2**31 - 1))
        self.evaluator.options = self.evaluator.options.model_copy(update={"seed": trial_seed})
        self._episode += 1
        ep = self._root / f"episode{self._episode}"
        ws = Workspace(ep / "workspace", self.config.tools.max_read_chars,
                       self.config.tools.max_write_bytes)
        from solforge.agents.visible import write_visible_problem

        write_visible_problem(problem, ws.root / PROBLEM_FILE)
        (ep / "attempts").mkdir(parents=True, exist_ok=True)
        self._attempts = _Attempts(ep / "attempts")
        tools = self.config.tools.model_copy(update={"device": self.options.device,
                                                     "languages": task.accepted()})
        self.toolbox = Toolbox(ws, problem, self.evaluator, self._attempts, tools)
        self.task, self._steps, self._started, self._done = task, 0, time.monotonic(), False
        text = problem_text(problem, self.options.device, task, self.options.policy,
                            self._reference_figures(problem), mode="tools")
        return text, {"problem": problem.name, "languages": task.accepted(),
                      "seed": trial_seed, "workspace": str(ws.root)}

    def _reference_figures(self, problem: Problem) -> list[WorkloadFigures] | None:
        if not self.config.figures:
            return None
        if problem.name not in self._figures:
            rec = self.evaluator.evaluate(problem, reference_solution(problem),
                                          workloads="visible", languages=None,
                                          policy="default")
            self._figures[problem.name] = reference_figures(rec) if rec.passed else []
        return self._figures[problem.name]

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done or self.toolbox is None or self._attempts is None:
            raise RuntimeError("the episode is over: call reset() first")
        self._steps += 1
        try:
            call = parse_action(action)
        except ValueError as e:
            return self._after(f"error: {e}", {"tool": None})
        if isinstance(call, str):
            source = extract_solution(call)
            if source is None:
                return self._after("error: no solution in the action: send the whole file "
                                   "defining ModelNew (or a ```python block with it)",
                                   {"tool": "solution"})
            self.toolbox.ws.write_file(SOLUTION_FILE, source)
            call = ToolCall(name="submit", arguments=json.dumps(
                {"path": SOLUTION_FILE, "summary": "a whole solution"}))
        try:
            text = self.toolbox.call(call)
        except Submitted:
            return self._end(self._attempts.verdict, terminated=True, tool=call.name)
        return self._after(text, {"tool": call.name})

    def _after(self, text: str, info: dict[str, Any]) -> tuple[str, float, bool, bool,
                                                                dict[str, Any]]:
        assert self.toolbox is not None
        spent = self._budget_spent()
        if not spent:
            return text, 0.0, False, False, {**info, "steps": self._steps}
        verdict = None
        if self.config.judge_best_on_truncate:
            verdict = self.toolbox.submit_best(f"budget spent: {spent}")
        obs, reward, term, trunc, end = self._end(verdict, terminated=False, tool=info["tool"])
        return f"{text}\n\n[episode truncated: {spent}]\n{obs}", reward, term, trunc, \
            {**end, "truncated_by": spent}

    def _budget_spent(self) -> str:
        assert self.toolbox is not None
        if self._steps >= self.config.max_steps:
            return f"{self._steps} steps (max_steps)"
        if self.toolbox.evaluations >= self.config.max_evaluations:
            return f"{self.toolbox.evaluations} evaluations (max_evaluations)"
        if time.monotonic() - self._started >= self.config.time_limit_s:
            return f"{self.config.time_limit_s:g} s (time_limit_s)"
        return ""

    def _end(self, verdict: EvaluationRecord | None, terminated: bool, tool: str | None
             ) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._done = True
        if verdict is None:
            assert self.reward_config.fail is not None
            r = Reward(value=self.reward_config.fail, stage="fail", status="NO_VERDICT",
                       reason="no attempt passed the visible workloads")
            return r.reason, r.value, terminated, not terminated, {
                "tool": tool, "steps": self._steps, "reward": r.model_dump()}
        r = reward_of(verdict, self.reward_config)
        return visible_feedback(verdict), r.value, terminated, not terminated, {
            "tool": tool, "steps": self._steps, "reward": r.model_dump(),
            "status": verdict.status.value}

    def close(self) -> None:
        if self._own_evaluator:
            self.evaluator.close()
        if self.config.workdir is None:
            shutil.rmtree(self._root, ignore_errors=True)
        super().close()
