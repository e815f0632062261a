"""Fixtures of the agent tests: a fast CPU evaluator, model settings for a loopback server,
and the scripted turns most scripts share."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from solforge.agents.model import ModelConfig
from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from tests.agents.loopback import Reply, Request
from tests.conftest import PROBLEMS, SOLUTIONS

TINY = PROBLEMS / "tiny_linear.py"
GOOD = (SOLUTIONS / "tiny_good_pytorch.py").read_text()
WRONG = GOOD.replace("* 1.5", "* 1.25")  # runs, returns the wrong values


def fast_options(**kw) -> EvalOptions:
    """CPU, eager baseline only, short timing: an evaluation takes a couple of seconds."""
    base: dict = {"device": "cpu", "baselines": ["eager"], "budget_ms": 40, "timeout_s": 60,
                  "trials": 2, "seed": 1}
    base.update(kw)
    return EvalOptions(**base)


@pytest.fixture(scope="session")
def evaluator():
    with Evaluator(fast_options()) as ev:
        yield ev


def model_config(url: str, api: str = "openai", **kw) -> ModelConfig:
    """Settings for a loopback server: no real waits between retries."""
    base: dict = {"api": api, "model": "claude-test" if api == "anthropic" else "gpt-test",
                  "base_url": url, "api_key": SecretStr("test-key"), "backoff_s": 0.01,
                  "backoff_max_s": 0.05, "max_retries": 3, "timeout_s": 30, "price_in": 1.0,
                  "price_out": 2.0}
    base.update(kw)
    return ModelConfig(**base)


def read_problem() -> Reply:
    return Reply("I read the reference first.", [("read_file", {"path": "problem.py"})])


def write_good(req: Request) -> Reply:
    # the scripted model proves it saw the reference, then writes the known-good solution
    assert "class Model" in req.last_tool_output(), req.last_tool_output()[:300]
    return Reply("A single addmm fuses the bias; gelu and the scale follow in one pass. "
                 "Expect parity with eager.", [("write_file", {"path": "solution.py",
                                                               "content": GOOD})])


def evaluate() -> Reply:
    return Reply("Check it on the visible workloads.", [("evaluate", {})])


def submit(req: Request | None = None) -> Reply:
    if req is not None:
        assert "evaluate: PASSED" in req.last_tool_output(), req.last_tool_output()
    return Reply("It passes.", [("submit", {"path": "solution.py",
                                            "summary": "addmm + gelu + scale"})])


def workspace_of(run_dir: Path, problem: str = "tiny_linear", worker: str = "llm") -> Path:
    return run_dir / "workspaces" / f"{worker}-{problem}"
