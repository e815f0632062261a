"""The worker-kind registry (``orchestrate.units``) and the import-path tables behind it
(``solforge.registry``): built-ins and plug-ins through one door, errors that name the fix,
and the layering it buys (search runs without the LLM package)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import solforge.orchestrate.units as units
from solforge.records.options import EvalOptions
from solforge.orchestrate.planner import Planner, PlannerConfig
from solforge.orchestrate.run import Run, RunSpec
from solforge.orchestrate.units import Unit, WorkerResult, agent_factory, register_agent
from solforge.problems import load_problem
from solforge.registry import RegistryError, lookup, resolve
from tests.conftest import PROBLEMS


def test_builtin_kinds_resolve_from_their_import_paths():
    from solforge.agents.worker import LLMWorker
    from solforge.search.agent import SearchWorker

    assert agent_factory("search") is SearchWorker
    assert agent_factory("llm") is LLMWorker


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(RegistryError, match=r"unknown agent 'nope'; use one of: search, llm"):
        agent_factory("nope")
    assert issubclass(RegistryError, ValueError)  # the CLI's one-line error path


def test_broken_import_path_names_what_to_fix(monkeypatch):
    monkeypatch.setattr(units, "_AGENTS", dict(units._AGENTS))
    register_agent("gone", "solforge_no_such_module.worker:Kind")
    with pytest.raises(RegistryError, match=r"agent 'gone': solforge_no_such_module.worker:"
                       r"Kind could not be loaded: importing solforge_no_such_module.worker "
                       r"failed \(ModuleNotFoundError"):
        agent_factory("gone")
    register_agent("typo", "solforge.search.agent:SerchWorker")
    with pytest.raises(RegistryError, match="has no attribute 'SerchWorker'"):
        agent_factory("typo")
    with pytest.raises(RegistryError, match="not an import path"):
        resolve("solforge.search.agent.SearchWorker")


def test_lookup_keeps_the_resolved_object():
    table = {"x": "solforge.registry:resolve"}
    assert lookup(table, "x", "thing") is resolve
    assert table["x"] is resolve


def test_plugin_kind_runs_in_the_planner(tmp_path, monkeypatch):
    monkeypatch.setattr(units, "_AGENTS", dict(units._AGENTS))
    seen: list[tuple[str, str, dict]] = []

    class Echo:
        def __init__(self, **settings):
            self.settings = settings

        def __call__(self, run, problem, evaluator, unit: Unit) -> WorkerResult:
            seen.append((problem.name, unit.worker, self.settings))
            return WorkerResult(problem=problem.name, status="finished")

    register_agent("echo", Echo)
    relu = load_problem(PROBLEMS / "kb_relu.py")
    run = Run.create(tmp_path / "run", RunSpec(agent="echo"))
    cfg = PlannerConfig(agents=["echo"], max_units=1, final_rounds=0)
    result = Planner(run, [relu], cfg, EvalOptions(), {"echo": {"k": 1}}).loop(poll_s=0.01)
    assert seen == [("kb_relu", "echo", {"k": 1})]
    assert [r.status for r in result.results] == ["finished"]


def test_search_imports_nothing_of_the_llm_package():
    code = ("import sys, solforge.search, solforge.search.agent, solforge.orchestrate.planner;"
            "bad = sorted(m for m in sys.modules if m.startswith('solforge.agents'));"
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
