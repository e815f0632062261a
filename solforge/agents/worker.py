"""One LLM agent on one problem inside a run: workspace, loop, ledger records.

:func:`run_llm_worker` creates ``RUN/workspaces/<worker>-<problem>/`` with the agent's
``problem.py`` (held-out workloads removed, ``visible.py``), runs the agent loop, and
writes what happened to the run:

- every ``evaluate`` / ``submit`` as an attempt (its source frozen under
  ``RUN/solutions/<problem>/<attempt>.py``, the agent's stated reasoning beside it, the
  previous attempt as parent, the workspace file it came from as ``path``) and an
  evaluation (``visible``, or ``full`` for the verdict); the same source evaluated twice
  is one attempt with two evaluations, and the reasoning given the second time (a
  submit's summary) is kept as a ``reasoning`` event;
- every model call's tokens and cost (``usage``), and events: ``worker_started``,
  ``model_retry``, ``worker_finished`` (status and message);
- the trajectory ``RUN/trajectories/<worker>-<problem>.jsonl``.

When the agent stops without submitting (a budget, a dead endpoint) and one of its
attempts passed the visible workloads, the best of them gets the full verdict, recorded
with that reason, so a run always ends with a verdict when there was something to judge.
An unfinished trajectory is resumed rather than restarted.

Not covered: several agents on one problem at once (give each its own ``worker`` name),
choosing problems or roles (the planner's job).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from solforge.agents import prompts
from solforge.agents.clients import make_client
from solforge.agents.errors import ModelError
from solforge.agents.loop import Agent, AgentConfig
from solforge.agents.model import ModelClient, ModelConfig
from solforge.agents.tools import Best, Toolbox, ToolConfig
from solforge.agents.trajectory import Trajectory, load
from solforge.agents.visible import write_visible_problem
from solforge.agents.workspace import PROBLEM_FILE, SOLUTION_FILE, Workspace
from solforge.bench import Evaluator, detect_language
from solforge.bench.judge.build import made_by_this_judge
from solforge.orchestrate.evalcache import CachedEvaluator
from solforge.orchestrate.run import Run
from solforge.orchestrate.units import Unit, WorkerResult
from solforge.problems.spec import Problem, ProblemError
from solforge.records import speedup_vs_best
from solforge.records.evaluation import EvaluationRecord


class WorkerConfig(BaseModel):
    """Everything one LLM worker needs besides the run, the problem and the evaluator."""

    model_config = ConfigDict(protected_namespaces=())

    model: ModelConfig | None = Field(None, description="the model (None: pass a client)")
    worker: str = Field("llm", description="worker name: trajectory and workspace names")
    role: str = Field("optimizer", description="optimizer, diagnoser or reviewer")
    role_file: Path | None = Field(None, description="a role prompt replacing the packaged one")
    protocol: Path | None = Field(None, description="a protocol replacing SKILL.md")
    languages: list[str] | None = Field(None, description="languages the agent may write")
    agent: AgentConfig = Field(default_factory=AgentConfig, description="budgets")
    tools: ToolConfig = Field(default_factory=ToolConfig, description="tool limits")
    start_from: Path | None = Field(None, description="a solution to put in solution.py")
    parent_attempt: int | None = Field(None, description="ledger id of start_from, if any")
    resume: bool = Field(True, description="continue an unfinished trajectory")
    submit_best_on_exit: bool = Field(True, description="judge the best visible attempt "
                                      "when the agent stops without submitting")


class LedgerRecorder:
    """The toolbox's :class:`~solforge.agents.tools.Recorder`, writing the run's ledger."""

    def __init__(self, run: Run, problem: str, agent: str, role: str, worker: str,
                 parent: int | None = None) -> None:
        self.run, self.problem = run, problem
        self.agent, self.role, self.worker = agent, role, worker
        self.last = parent
        self.by_hash: dict[str, int] = {}
        for a in run.ledger.attempts(problem):  # a resumed worker finds its own attempts
            if a["worker"] == worker:
                self.by_hash[a["source_hash"]] = int(a["id"])
                self.last = int(a["id"])

    def attempt(self, source: str, path: str, reasoning: str) -> tuple[int, Path]:
        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        known = self.by_hash.get(digest)
        if known is not None:
            if reasoning:  # the same source again (a submit after evaluate): keep the why
                self.run.ledger.event("reasoning", problem=self.problem, worker=self.worker,
                                      attempt=known, reasoning=reasoning)
            return known, self.run.solution_path(self.problem, known)
        attempt = self.run.ledger.add_attempt(
            self.problem, source, detect_language(source), agent=self.agent, role=self.role,
            worker=self.worker, parent=self.last, reasoning=reasoning, path=path)
        frozen = self.run.solution_path(self.problem, attempt)
        frozen.write_text(source)
        self.by_hash[digest] = attempt
        self.last = attempt
        return attempt, frozen

    def evaluation(self, attempt: int, kind: str, record: EvaluationRecord) -> None:
        self.run.ledger.add_evaluation(self.problem, record.to_json(), kind=kind,
                                       attempt=attempt)


def _restore_best(run: Run, recorder: LedgerRecorder) -> Best | None:
    """The best passing visible evaluation among this worker's attempts (on resume), of
    those this judge's code made (``judge/build.py``: an older judge's may be wrong)."""
    mine = set(recorder.by_hash.values())
    best = None
    for e in run.ledger.evaluations(recorder.problem, kind="visible"):
        if e["attempt"] in mine and e["status"] == "PASSED" and \
                made_by_this_judge(e["record"]):
            score = speedup_vs_best(e["record"]) or 0.0
            if best is None or score > best.score:
                best = Best(e["attempt"], run.solution_path(recorder.problem, e["attempt"]),
                            EvaluationRecord.from_json(e["record"]), score)
    return best


def _last_verdict(run: Run, problem: str, worker: str) -> EvaluationRecord | None:
    mine = {a["id"] for a in run.ledger.attempts(problem) if a["worker"] == worker}
    full = [e for e in run.ledger.evaluations(problem, kind="full") if e["attempt"] in mine]
    return EvaluationRecord.from_json(full[-1]["record"]) if full else None


def _with_verdict(result: WorkerResult, verdict: EvaluationRecord | None) -> WorkerResult:
    if verdict is None:
        return result
    return result.model_copy(update={
        "verdict": verdict.status.value, "speedup_vs_eager": verdict.speedup_vs_eager,
        "speedup_vs_compile": verdict.speedup_vs_compile, "sol_score": verdict.sol_score})


def run_llm_worker(run: Run, problem: Problem, evaluator: Evaluator, config: WorkerConfig,
                   client: ModelClient | None = None,
                   on_event: Callable[..., None] | None = None,
                   stop: Callable[[], str] | None = None) -> WorkerResult:
    """Run one LLM agent on ``problem`` and record everything in ``run`` (see module doc).

    ``client`` defaults to ``make_client(config.model)``; ``on_event(kind, **data)`` sees
    model retries, context trims and evaluations as they happen. Never raises for
    anything the model, the tools or the candidate do; the result and the ledger say how
    it ended. ``stop()`` (the planner's: its budget spent) returning a reason ends the
    agent before its next model call; its best visible attempt is then submitted as after
    any other budget (``submit_best_on_exit``).
    """
    led, name, worker = run.ledger, problem.name, config.worker
    traj_path = run.trajectory_path(worker, name)
    ws = Workspace(run.dir / "workspaces" / f"{worker}-{name}",
                   config.tools.max_read_chars, config.tools.max_write_bytes)
    result = WorkerResult(problem=name, status="error", trajectory=str(traj_path),
                          workspace=str(ws.root))
    state = load(traj_path) if config.resume and traj_path.is_file() else None
    if state is not None and state.exit is not None:  # finished before: report, don't redo
        result = result.model_copy(update={"status": state.exit.get("status", "error"),
                                           "message": state.exit.get("message", ""),
                                           "steps": state.steps, "usage": state.usage})
        return _with_verdict(result, _last_verdict(run, name, worker))
    try:
        if client is None:
            if config.model is None:
                raise ModelError("run_llm_worker needs config.model or a client")
            client = make_client(config.model)
        write_visible_problem(problem, ws.root / PROBLEM_FILE)
    except (ModelError, ProblemError) as e:
        status = e.status if isinstance(e, ModelError) else "error"
        led.event("worker_finished", problem=name, worker=worker, status=status,
                  message=str(e))
        return result.model_copy(update={"status": status, "message": str(e)})
    model = client.config.model
    led.add_problem(name, str(problem.path), problem.category)
    led.set_problem_state(name, "active")
    if config.start_from is not None and state is None:
        shutil.copyfile(config.start_from, ws.root / SOLUTION_FILE)
    tool_cfg = config.tools.model_copy(update={"device": evaluator.options.device,
                                               "languages": config.languages})
    recorder = LedgerRecorder(run, name, f"llm:{model}", config.role, worker,
                              config.parent_attempt)

    def event(kind: str, **data: Any) -> None:
        if kind in ("model_retry", "context_too_long", "tool_crash", "cost_unpriced"):
            led.event(kind, problem=name, worker=worker, **data)
        if on_event is not None:
            on_event(kind, problem=name, **data)

    toolbox = Toolbox(ws, problem, evaluator, recorder, tool_cfg, on_event=event)
    toolbox.best = _restore_best(run, recorder) if state is not None else None
    system = prompts.system_prompt(config.protocol, config.role, config.role_file)
    budgets = {"steps": config.agent.step_limit, "tokens": config.agent.token_limit,
               "cost_usd": config.agent.cost_limit_usd, "time_s": config.agent.time_limit_s}
    task = prompts.task_message(problem, evaluator.options.device, config.languages,
                                evaluator.options.policy, budgets,
                                has_solution=(ws.root / SOLUTION_FILE).is_file())
    header = {"worker": worker, "problem": name, "problem_path": str(problem.path),
              "role": config.role, "model": client.config.public(),
              "languages": config.languages, "device": evaluator.options.device,
              "protocol": str(config.protocol) if config.protocol else "SKILL.md"}
    trajectory = Trajectory(traj_path)
    agent = Agent(client, toolbox, config.agent, trajectory, on_event=event,
                  on_usage=lambda u: led.add_usage(worker, name, model, u.input_tokens,
                                                   u.output_tokens, u.cost_usd or 0.0),
                  stop=stop)
    led.event("worker_started", problem=name, worker=worker, model=model, role=config.role,
              resumed=state is not None)
    out = agent.run(system, task, header=header, resume=state)
    result = result.model_copy(update={"status": out.status, "message": out.message,
                                       "steps": out.steps, "usage": out.usage})
    verdict: EvaluationRecord | None = None
    if out.status == "submitted":
        attempt = out.data.get("attempt")
        full = [e for e in led.evaluations(name, kind="full") if e["attempt"] == attempt]
        verdict = EvaluationRecord.from_json(full[-1]["record"]) if full else None
        result.attempt = attempt
    elif config.submit_best_on_exit and toolbox.best is not None:
        best = toolbox.best.attempt
        verdict = toolbox.submit_best(
            f"the agent stopped without submitting ({out.status}: {out.message}); the "
            f"worker submitted its best visible attempt {best}")
        result.attempt, result.auto_submitted = best, True
        trajectory.event("auto_submitted", attempt=best,
                         verdict=verdict.status.value if verdict else None)
    result = _with_verdict(result, verdict)
    state_name = "converged" if result.verdict == "PASSED" else \
        "failed" if out.status in ("model_error", "error") else "exhausted"
    led.set_problem_state(name, state_name)
    led.event("worker_finished", problem=name, worker=worker, status=out.status,
              message=out.message, verdict=result.verdict, attempt=result.attempt,
              auto_submitted=result.auto_submitted, steps=out.steps,
              tokens=out.usage.tokens, cost_usd=out.usage.cost_usd)
    return result


class LLMWorker:
    """The planner's worker kind ``llm``: ``LLMWorker(model=..., client=..., on_event=...,
    **settings)`` with ``model`` a :class:`ModelConfig` (or ``client`` a ready client) and
    any other :class:`WorkerConfig` field (languages, protocol, agent budgets); runs one
    unit as :func:`run_llm_worker`, with the unit's worker name, role and starting point."""

    def __init__(self, model: ModelConfig | None = None, client: ModelClient | None = None,
                 on_event: Callable[..., None] | None = None, **settings: Any) -> None:
        self.model, self.client, self.on_event = model, client, on_event
        self.settings = settings

    def __call__(self, run: Run, problem: Problem, evaluator: CachedEvaluator,
                 unit: Unit) -> WorkerResult:
        cfg = WorkerConfig(**{**self.settings, "model": self.model, "worker": unit.worker,
                              "role": unit.role, "start_from": unit.start_from,
                              "parent_attempt": unit.parent_attempt})
        return run_llm_worker(run, problem, evaluator, cfg, client=self.client,
                              on_event=self.on_event, stop=unit.stop)
