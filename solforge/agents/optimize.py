"""``solforge optimize TARGET... --agent llm``: LLM workers over problems, in one run.

:func:`optimize_llm` resolves the model settings and the problems first (a missing key,
an unknown problem or protocol file fails here, before any run directory exists, with
one line that says what to set), then creates the run (or reopens it with ``resume``),
and hands the problems to the planner (``orchestrate/planner.py``) with the simplest plan:
one LLM worker, one unit per problem, in turn (``worker.py`` runs each). If the endpoint
fails before the first model call of a problem succeeds, the remaining problems are not
started: the run is marked ``stopped`` and the result says why.

Not covered: several workers, roles in turn, final re-measurement: ``solforge optimize``
builds those plans on the same planner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from solforge.agents import prompts
from solforge.agents.loop import AgentConfig
from solforge.agents.model import ModelClient
from solforge.agents.settings import resolve_model_config
from solforge.agents.tools import ToolConfig
from solforge.bench import languages as known_languages
from solforge.orchestrate.planner import Planner
from solforge.orchestrate.planner_config import PlannerConfig
from solforge.orchestrate.run import Run, RunSpec
from solforge.orchestrate.units import Unit, WorkerResult
from solforge.problems import resolve_target
from solforge.problems.spec import Problem
from solforge.records.options import EvalOptions


class OptimizeResult(BaseModel):
    """A finished (or stopped) LLM run: where it is and how each problem ended."""

    run_dir: str
    status: str = Field(description="finished or stopped")
    message: str = ""
    results: list[WorkerResult] = Field(default_factory=list)
    broken: list[str] = Field(default_factory=list, description="problem files that failed "
                              "to load, with the error")


def _problems(targets: list[str]) -> tuple[list[Problem], list[str]]:
    found: dict[str, Problem] = {}
    broken: list[str] = []
    for t in targets:
        loaded, bad = resolve_target(t)
        for p in loaded:
            found.setdefault(p.name, p)
        broken += [f"{path}: {err}" for path, err in bad]
    return list(found.values()), broken


def optimize_llm(
    targets: list[str],
    model: str | None = None,
    base_url: str | None = None,
    api: str | None = None,
    device: str = "cpu",
    run_dir: str | Path | None = None,
    language: list[str] | None = None,
    protocol: str | Path | None = None,
    *,
    api_key: str | None = None,
    llm_config: str | Path | None = None,
    role: str = "optimizer",
    role_file: str | Path | None = None,
    max_steps: int = 60,
    max_tokens: int = 0,
    max_cost: float = 10.0,
    max_time_s: float = 3600.0,
    context_tokens: int = 100_000,
    price_in: float | None = None,
    price_out: float | None = None,
    policy: str = "default",
    timeout_s: float = 300.0,
    resume: bool = False,
    worker: str = "llm",
    eval_options: EvalOptions | None = None,
    client: ModelClient | None = None,
    model_overrides: dict[str, Any] | None = None,
    on_result: Callable[[WorkerResult], None] | None = None,
    on_event: Callable[..., None] | None = None,
) -> OptimizeResult:
    """Run an LLM agent on every problem of ``targets``; see the module docstring.

    Raises, before creating anything: :class:`~solforge.agents.errors.ModelError` (model,
    key, API), :class:`~solforge.problems.ProblemError` (targets), ``FileNotFoundError``
    (protocol or role file, or ``resume`` without a run), ``FileExistsError`` (``run_dir``
    holds a run and ``resume`` is off), ``ValueError`` (language, role, policy).
    ``eval_options`` replaces the evaluator settings built from ``device``, ``policy``,
    ``timeout_s`` and ``language`` (tests pass fast CPU options); ``client`` replaces
    the SDK client (plug-ins, tests); ``on_event`` receives ``(kind, **data)`` for model
    retries so a CLI can show them.
    """
    langs = list(language) if language else None
    for lang in langs or []:
        if lang not in known_languages():
            raise ValueError(f"unknown --language {lang!r}; use {', '.join(known_languages())}")
    if policy not in ("default", "strict"):
        raise ValueError("--policy is 'default' or 'strict'")
    prompts.system_prompt(protocol, role, role_file)  # fail now on a bad file or role
    mc = client.config if client is not None else resolve_model_config(
        model, api, base_url, api_key, llm_config, price_in=price_in, price_out=price_out,
        **(model_overrides or {}))
    problems, broken = _problems(targets)
    opts = eval_options or EvalOptions(device=device, policy=policy, timeout_s=timeout_s,
                                       languages=langs)
    agent_cfg = AgentConfig(step_limit=max_steps, token_limit=max_tokens,
                            cost_limit_usd=max_cost, time_limit_s=max_time_s,
                            context_tokens=context_tokens)
    if resume:
        if run_dir is None:
            raise FileNotFoundError("resume needs the run directory (--run-dir or --resume)")
        run = Run.open(Path(run_dir))
        run.mark("running")
    else:
        spec = RunSpec(agent="llm", targets=list(targets), device=opts.device,
                       options={"model": mc.public(), "role": role, "languages": langs,
                                "protocol": str(protocol) if protocol else None,
                                "eval": opts.model_dump(mode="json")},
                       budgets=agent_cfg.model_dump())
        run = Run.create(Path(run_dir) if run_dir else None, spec)
    for p in problems:
        run.ledger.add_problem(p.name, str(p.path), p.category)
    for b in broken:
        run.ledger.event("problem_broken", message=b)
    settings = {
        "model": mc, "client": client, "role_file": role_file, "protocol": protocol,
        "languages": langs, "agent": agent_cfg, "resume": True,
        "tools": ToolConfig(command_timeout_s=timeout_s, memory_mb=opts.memory_mb)}
    # one worker, one unit per problem, in turn: the planner's simplest plan
    plan = PlannerConfig(agents=["llm"], workers=1, devices=[opts.device], roles=[role],
                         max_units=1, final_rounds=0)
    out = OptimizeResult(run_dir=str(run.dir), status="finished", broken=broken)

    def unit_done(unit: Unit, result: Any) -> None:
        if result is not None and on_result is not None:
            on_result(result)

    if on_event is not None:
        settings["on_event"] = on_event
    planner = Planner(run, problems, plan, opts, {"llm": settings},
                      on_unit_done=unit_done)
    try:
        result = planner.loop()
    except BaseException:  # interrupted (Ctrl-C): "stopped", and --resume continues it
        run.mark("stopped")
        raise
    out.results = [r for r in result.results if isinstance(r, WorkerResult)]
    if planner.halted:
        out.status, out.message = "stopped", result.reason
    return out
