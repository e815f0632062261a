"""The built-in agents, registered with the planner through the same door as plug-ins.

- ``search``: the built-in search agent (``solforge.search``), no LLM needed.
- ``llm``: an LLM worker (``solforge.agents``); settings: ``model`` (a ``ModelConfig``),
  optionally ``client`` and any ``WorkerConfig`` field (languages, protocol, agent budgets).

Each factory takes the agent's settings and returns the function that runs one unit.
"""

from __future__ import annotations

from typing import Any

from solforge.orchestrate.evalcache import CachedEvaluator
from solforge.orchestrate.planner import Unit, register_agent
from solforge.orchestrate.run import Run
from solforge.problems.spec import Problem


def search_agent(**settings: Any):
    from solforge.search import SearchConfig, run_search_worker

    base = SearchConfig(**settings)  # a bad setting fails when the planner is built

    def unit_fn(run: Run, problem: Problem, evaluator: CachedEvaluator, unit: Unit) -> Any:
        cfg = base.model_copy(update={"worker": unit.worker})
        return run_search_worker(run, problem, evaluator, cfg, stop=unit.stop)

    return unit_fn


def llm_agent(model: Any = None, client: Any = None, on_event: Any = None,
              **settings: Any):
    from solforge.agents.worker import WorkerConfig, run_llm_worker

    def unit_fn(run: Run, problem: Problem, evaluator: CachedEvaluator, unit: Unit) -> Any:
        cfg = WorkerConfig(**{**settings, "model": model, "worker": unit.worker,
                              "role": unit.role, "start_from": unit.start_from,
                              "parent_attempt": unit.parent_attempt})
        return run_llm_worker(run, problem, evaluator, cfg, client=client,
                              on_event=on_event, stop=unit.stop)

    return unit_fn


register_agent("search", search_agent)
register_agent("llm", llm_agent)
