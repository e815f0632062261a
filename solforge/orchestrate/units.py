"""The nouns every worker shares with the planner: a unit of work, the worker that runs it,
what it returns, and the registry of worker kinds.

- :class:`Unit`: one worker's turn on one problem (its role, the attempt to start from,
  the run's stop signal).
- :class:`Worker`: anything called as ``worker(run, problem, evaluator, unit)``; a
  **worker kind** is a factory ``kind(**settings) -> Worker`` (``PlannerConfig.agents``
  names kinds, the planner passes each kind its settings).
- :class:`Surveyor`: a worker that can also judge a problem's reference alone, before the
  search starts (the planner's survey).
- :class:`WorkerResult` (with :class:`Usage`, the tokens and cost it spent): how one unit
  ended; the planner reads ``stop_run`` and ``cut_short`` from it.

Worker kinds are a ``name -> "module:attr"`` table (``solforge.registry``): the built-in
``search`` (``solforge.search.agent:SearchWorker``, no LLM needed) and ``llm``
(``solforge.agents.worker:LLMWorker``) are rows of it, and :func:`register_agent` adds a
plug-in's (an import path or the factory itself) through the same door. This module
imports neither package: a kind's module is imported when a planner asks for it.

Not covered: workers on other machines (on the Ray backend too they are threads of the
driver; only their evaluations go to the cluster: docs/SCALE.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from solforge.orchestrate.evalcache import CachedEvaluator
from solforge.orchestrate.run import Run
from solforge.problems.spec import Problem
from solforge.registry import lookup


@dataclass
class Unit:
    """One worker's turn on one problem."""

    id: int
    problem: str
    agent: str
    role: str
    worker: str
    start_from: Path | None = None
    parent_attempt: int | None = None
    # the run's stop reason once it has one (a budget spent), else "": a worker that asks
    # between its steps ends early and keeps what it has
    stop: Callable[[], str] | None = None


class Usage(BaseModel):
    """Tokens of one model call (or a sum of calls) and their cost; cost None when
    unpriced. A worker without a model reports zeros."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost_usd is None and other.cost_usd is None else \
            (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(input_tokens=self.input_tokens + other.input_tokens,
                     output_tokens=self.output_tokens + other.output_tokens,
                     cost_usd=cost, calls=self.calls + other.calls)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class WorkerResult(BaseModel):
    """How one worker's run on one problem ended."""

    problem: str
    status: str = Field(description="the worker's exit: submitted, limits_exceeded, "
                        "finished, failed, ...")
    message: str = ""
    verdict: str | None = Field(None, description="status of the verdict on all workloads, "
                                "if any (an LLM worker's ``full``, the search worker's "
                                "``final``)")
    attempt: int | None = Field(None, description="the attempt the verdict is about")
    auto_submitted: bool = False
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    sol_score: float | None = None
    steps: int = 0
    cut_short: str = Field("", description="why the unit ended before its own budgets did "
                           "(the run stopping: its wall budget spent), '' when it did not; "
                           "such a unit does not count against the problem's units, so a "
                           "resumed run goes on with the problem. Set by the search worker; "
                           "an LLM worker that stopped reports its saved exit again when "
                           "resumed, so its stopped units count as before")
    usage: Usage = Field(default_factory=Usage)
    trajectory: str = ""
    workspace: str = ""

    @property
    def stop_run(self) -> str:
        """Why the whole run should stop ('' to go on): the model endpoint failed before
        the first step succeeded, so every other problem would fail the same way."""
        return self.message if self.status == "model_error" and self.steps == 0 else ""


class Worker(Protocol):
    """Runs one unit; never raises for anything a candidate or a model does (the result
    and the ledger say how it ended)."""

    def __call__(self, run: Run, problem: Problem, evaluator: CachedEvaluator,
                 unit: Unit) -> WorkerResult: ...


class Surveyor(Protocol):
    """A worker that can also **survey** a problem: judge its reference once, before any
    problem is searched, and say how far it runs from its speed of light (the fraction
    ``bound / time``, None when unknown). The planner surveys every problem first when
    there are more problems than workers (``PlannerConfig.survey``), so the search goes
    where the measured gap is, not in the order the problems were listed; the worker's
    later unit reuses the survey's evaluation (same candidate source, same record). A
    worker kind without ``survey`` (the LLM worker) is simply not surveyed."""

    def survey(self, run: Run, problem: Problem, evaluator: CachedEvaluator,
               unit: Unit) -> float | None: ...


WorkerKind = Callable[..., Worker]

_AGENTS: dict[str, str | WorkerKind] = {
    "search": "solforge.search.agent:SearchWorker",
    "llm": "solforge.agents.worker:LLMWorker",
}


def register_agent(name: str, kind: str | WorkerKind) -> None:
    """Make ``name`` usable in ``PlannerConfig.agents``: ``kind`` is a ``"module:attr"``
    import path or the factory itself; ``kind(**settings)`` returns the :class:`Worker`
    that runs one unit. The built-ins are rows of the same table."""
    _AGENTS[name] = kind


def agent_factory(name: str) -> WorkerKind:
    """The worker kind ``name``; :class:`~solforge.registry.RegistryError` (a
    ``ValueError``) naming the known kinds, or the module that failed to import."""
    return lookup(_AGENTS, name, "agent")
