"""The settings ``solforge optimize`` builds, from ``--config run.toml`` and its flags.

The file has one table per settings model, checked by that model
(``orchestrate.config_file``)::

    [planner]            # PlannerConfig: agents, workers, devices, roles, max_units, ...
    agents = ["search"]
    max_units = 2
    [planner.budgets]    # Budgets: wall_s, device_s, tokens, cost_usd, attempts
    wall_s = 3600
    [search]             # SearchConfig: max_candidates, gpu_seconds, families, ...
    max_candidates = 8
    [llm]                # WorkerConfig: protocol, languages, [llm.agent], [llm.tools], ...
    [llm.model]          # ModelConfig: model, api, base_url, temperature, ...
    model = "gpt-4.1"
    [llm.agent]          # AgentConfig: step_limit, cost_limit_usd, ...
    step_limit = 40
    [eval]               # EvalOptions: device, timeout_s, trials, baselines, ...
    device = "cuda"

A flag typed on the command line overrides the file; a flag left out gives its default
only where the file is silent. :data:`FLAG_KEYS` says which key each flag sets.

Not covered: the ``--resume`` run's own settings (a resumed run reads its targets, agents
and device from the run; the file and flags give the rest); the results table of a plain
``--agent llm`` run (one worker, one role: ``optimize_llm``), which takes no file: with
``--config`` the planner runs it as configured.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from solforge.orchestrate.config_file import read_sections
from solforge.orchestrate.planner_config import PlannerConfig
from solforge.records.options import EvalOptions


def csv(value: str | None) -> list[str]:
    """A comma-separated flag as a list (blanks dropped)."""
    return [x.strip() for x in (value or "").split(",") if x.strip()]


def _langs(value: list[str] | None) -> list[str] | None:
    return list(value or []) or None


# flag (the optimize parameter) -> (section, key path in it, conversion of the flag value)
FLAG_KEYS: dict[str, tuple[str, tuple[str, ...], Callable[[Any], Any] | None]] = {
    "agent": ("planner", ("agents",), csv),
    "workers": ("planner", ("workers",), None),
    "roles": ("planner", ("roles",), csv),
    "reopen": ("planner", ("reopen",), csv),
    "max_units": ("planner", ("max_units",), None),
    "patience": ("planner", ("patience",), None),
    "converge_sol": ("planner", ("converge_sol",), None),
    "unit_timeout_s": ("planner", ("unit_timeout_s",), None),
    "floor_s": ("planner", ("floor_s",), None),
    "backend": ("planner", ("backend",), None),
    "address": ("planner", ("address",), None),
    "budget_wall_s": ("planner", ("budgets", "wall_s"), None),
    "budget_device_s": ("planner", ("budgets", "device_s"), None),
    "budget_tokens": ("planner", ("budgets", "tokens"), None),
    "budget_cost": ("planner", ("budgets", "cost_usd"), None),
    "budget_attempts": ("planner", ("budgets", "attempts"), None),
    "device": ("eval", ("device",), None),
    "timeout": ("eval", ("timeout_s",), None),
    "budget_ms": ("eval", ("budget_ms",), None),
    "baselines": ("eval", ("baselines",), csv),
    "policy": ("eval", ("policy",), None),
    "language": ("eval", ("languages",), _langs),
    "max_candidates": ("search", ("max_candidates",), None),
    "search_seconds": ("search", ("gpu_seconds",), None),
    "compile_seconds": ("search", ("compile_seconds",), None),
    "explore_budget_ms": ("search", ("explore_budget_ms",), None),
    "explore_max_calls": ("search", ("explore_max_calls",), None),
    "families": ("search", ("families",), lambda v: csv(v) or None),
    "model": ("llm", ("model", "model"), None),
    "base_url": ("llm", ("model", "base_url"), None),
    "api": ("llm", ("model", "api"), None),
    "api_key": ("llm", ("model", "api_key"), None),
    "price_in": ("llm", ("model", "price_in"), None),
    "price_out": ("llm", ("model", "price_out"), None),
    "protocol": ("llm", ("protocol",), None),
    "role_file": ("llm", ("role_file",), None),
    "max_steps": ("llm", ("agent", "step_limit"), None),
    "max_tokens": ("llm", ("agent", "token_limit"), None),
    "max_cost": ("llm", ("agent", "cost_limit_usd"), None),
    "max_time_s": ("llm", ("agent", "time_limit_s"), None),
    "context_tokens": ("llm", ("agent", "context_tokens"), None),
}


def section_models() -> dict[str, type[BaseModel]]:
    """The settings model of each section (the LLM's imported only here, when asked)."""
    from solforge.agents.worker import WorkerConfig
    from solforge.search.config import SearchConfig

    return {"planner": PlannerConfig, "search": SearchConfig, "llm": WorkerConfig,
            "eval": EvalOptions}


# WorkerConfig fields the planner sets for each unit
_PER_UNIT = {"llm": {"worker": "the planner's worker names", "role": "[planner] roles",
                     "start_from": "the problem's best attempt",
                     "parent_attempt": "the problem's best attempt"}}


def merged_sections(config: Path | None, flags: dict[str, Any],
                    typed: Callable[[str], bool]) -> dict[str, dict[str, Any]]:
    """The settings of each section: the file's (if any), with each flag's value where
    ``typed(flag)`` (given on the command line) or where the file does not set its key.
    Raises :class:`~solforge.orchestrate.config_file.ConfigFileError` for a bad file."""
    sections: dict[str, dict[str, Any]] = (
        read_sections(config, section_models(), _PER_UNIT) if config is not None
        else {name: {} for name in ("planner", "search", "llm", "eval")})
    for flag, (section, path, convert) in FLAG_KEYS.items():
        table = sections[section]
        for key in path[:-1]:
            table = table.setdefault(key, {})
        if typed(flag) or path[-1] not in table:
            value = flags[flag]
            table[path[-1]] = convert(value) if convert is not None else value
    llm = sections["llm"]
    if "languages" not in llm:  # --language is what the evaluator counts and the agent writes
        llm["languages"] = sections["eval"]["languages"]
    return sections


def devices(sections: dict[str, dict[str, Any]], gpus: str | None,
            typed: Callable[[str], bool]) -> list[str]:
    """The planner's devices: ``--gpus``, else the file's ``[planner] devices`` (unless
    ``--device`` was typed), else every visible GPU with a CUDA device (on the Ray
    backend: ``["cuda"]``, which it turns into every GPU of its cluster), else the CPU."""
    device = sections["eval"]["device"]
    if gpus:
        return [f"cuda:{g}" for g in csv(gpus)]
    if "devices" in sections["planner"] and not typed("device"):
        return list(sections["planner"]["devices"])
    if device.startswith("cuda") and sections["planner"].get("backend") == "ray":
        return ["cuda"]
    if device.startswith("cuda"):
        import torch

        return [f"cuda:{i}" for i in range(max(1, torch.cuda.device_count()))]
    return ["cpu"]


def llm_settings(llm: dict[str, Any], llm_config: Path | None) -> dict[str, Any]:
    """The ``llm`` worker kind's settings: the model resolved (flags, the file, the LLM
    config file, the environment: ``agents.settings``) and the rest validated."""
    from solforge.agents.settings import resolve_model_config
    from solforge.agents.worker import WorkerConfig

    model = dict(llm.get("model") or {})
    mc = resolve_model_config(model.pop("model", None), model.pop("api", None),
                              model.pop("base_url", None), model.pop("api_key", None),
                              llm_config, **model)
    settings = {**llm, "model": mc}
    WorkerConfig(**settings)  # a bad value fails before the run exists
    return settings


def recorded_llm(settings: dict[str, Any]) -> dict[str, Any]:
    """The ``llm`` settings as the run records them: every field the units share, the
    model without its key."""
    from solforge.agents.worker import WorkerConfig

    exclude: Any = {"model": {"api_key"}, **{k: True for k in _PER_UNIT["llm"]}}
    return WorkerConfig(**settings).model_dump(mode="json", exclude=exclude)
