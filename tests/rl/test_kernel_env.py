"""KernelEnv played by a scripted policy with a real CPU evaluator: tool calls to a
submit, a whole solution, a budget that truncates, seeds that repeat an episode."""

from __future__ import annotations

import pytest

from solforge.problems import load_problem
from solforge.records.options import EvalOptions
from solforge.rl.kernel_env import EnvConfig, KernelEnv
from tests.conftest import PROBLEMS, SOLUTIONS

TRITON = (SOLUTIONS / "tiny_good_triton.py").read_text()
WRONG = TRITON.replace("1.5, BM=16", "1.25, BM=16")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    opts = EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=60,
                       trials=2, policy="strict")
    e = KernelEnv([load_problem(PROBLEMS / "tiny_linear.py")], options=opts,
                  config=EnvConfig(max_steps=6, workdir=tmp_path_factory.mktemp("env")))
    yield e
    e.close()


def tool(name: str, **arguments) -> dict:
    return {"tool": name, "arguments": arguments}


def test_scripted_episode_with_tools_ends_in_a_verdict(env):
    text, info = env.reset(seed=7, options={"problem": "tiny_linear", "languages": ["triton"]})
    assert "# solforge protocol" in text and "class Model" in text
    assert "Speed of light on cpu" in text and "Languages allowed: triton" in text
    assert '"held"' not in text  # the held-out workload is not in the problem text
    obs, r, term, trunc, _ = env.step(tool("read_file", path="problem.py"))
    assert "class Model" in obs and '"held"' not in obs and (r, term, trunc) == (0.0, False,
                                                                               False)
    obs, *_ = env.step(tool("write_file", path="solution.py", content=TRITON))
    assert obs.startswith("wrote")
    obs, r, term, trunc, _ = env.step(tool("edit_file", old="no such text", new="x"))
    assert obs.startswith("error:") and not term
    obs, r, term, _, _ = env.step(tool("evaluate"))
    assert "evaluate: PASSED" in obs and "visible workloads" in obs and r == 0.0 and not term
    obs, r, term, trunc, info = env.step(tool("submit", summary="one fused triton kernel"))
    assert term and not trunc and info["reward"]["stage"] in (
        "correct", "faster_than_eager", "faster_than_compile")
    assert r >= 1.0 and "verdict: PASSED" in obs and "held-out workload(s) counted" in obs
    with pytest.raises(RuntimeError, match="reset"):
        env.step(tool("list_files"))


def test_a_whole_solution_is_submitted_and_seeds_repeat(env):
    _, first = env.reset(seed=11, options={"problem": "tiny_linear"})
    _, again = env.reset(seed=11, options={"problem": "tiny_linear"})
    _, other = env.reset(seed=12)
    assert first["seed"] == again["seed"] != other["seed"]
    env.reset(seed=11)
    _, r, term, trunc, info = env.step(f"My answer:\n```python\n{WRONG}```")
    assert term and not trunc and r == -1.0 and info["status"] == "INCORRECT_NUMERICAL"


def test_budgets_truncate(env):
    env.config = env.config.model_copy(update={"max_steps": 2})
    env.reset(seed=3)
    env.step(tool("list_files"))
    obs, r, term, trunc, info = env.step({"name": "grep", "arguments": '{"pattern": "gelu"}'})
    assert trunc and not term and r == -1.0
    assert "episode truncated" in obs and "max_steps" in info["truncated_by"]
