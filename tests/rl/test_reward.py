"""Rewards, feedback, tasks and extraction on records and texts (no evaluator runs here;
the server and environment tests run real evaluations)."""

from __future__ import annotations

import json

import pytest

from solforge.records.evaluation import (
    EvaluationRecord,
    Finding,
    Status,
    WorkloadResult,
)
from solforge.rl.extract import extract_solution
from solforge.rl.feedback import visible_feedback
from solforge.rl.reward import RewardConfig, reward_of
from solforge.rl.task import Task, TaskError, kernel_languages
from solforge.rl.wire import OpenRLHFRequest, parse_batch


def rec(status=Status.PASSED, eager=None, comp=None, sol=None, **kw) -> EvaluationRecord:
    return EvaluationRecord(problem="p", solution="s", status=status, speedup_vs_eager=eager,
                            speedup_vs_compile=comp, sol_score=sol, **kw)


def test_staged_reward_follows_cuda_agents_stages():
    cfg = RewardConfig()
    got = [(r.stage, r.value) for r in (
        reward_of(rec(Status.INCORRECT_NUMERICAL), cfg),
        reward_of(rec(eager=1.04, comp=2.0), cfg),
        reward_of(rec(eager=1.05, comp=1.0), cfg),
        reward_of(rec(eager=1.2, comp=1.06), cfg),
        reward_of(rec(), cfg))]
    assert got == [("fail", -1.0), ("correct", 1.0), ("faster_than_eager", 2.0),
                   ("faster_than_compile", 3.0), ("correct", 1.0)]


def test_hacks_and_findings_get_the_lowest_value_whatever_their_speed():
    for cfg in (RewardConfig(), RewardConfig(scheme="sol"), RewardConfig(hack=-5)):
        fast = rec(eager=9.0, comp=9.0, sol=1.0)
        hack = rec(Status.REWARD_HACK, eager=9.0, comp=9.0)
        flagged = rec(eager=9.0, comp=9.0, sol=1.0, flags=["torch_fallback"], findings=[
            Finding(rule="torch_fallback.aten", flag="torch_fallback", message="aten ran")])
        values = [reward_of(r, cfg).value for r in (fast, rec(Status.TIMEOUT), hack, flagged)]
        assert values[2] == values[3] == cfg.lowest == min(values)
        assert reward_of(flagged, cfg).stage == "hack"
    with pytest.raises(ValueError, match="never earn more than a failure"):
        RewardConfig(hack=0.5)


def test_sol_reward_is_continuous_and_falls_back_to_the_speedup_curve():
    cfg = RewardConfig(scheme="sol")
    assert reward_of(rec(Status.COMPILE_ERROR), cfg).value == 0.0
    assert reward_of(rec(sol=0.5), cfg).value == pytest.approx(0.55)
    assert reward_of(rec(sol=1.0), cfg).value == pytest.approx(1.0)
    # no SOL profile (a CPU): v / (1 + v) of the speedup over the best baseline
    w = WorkloadResult(name="a", correct=True, time_ms=1.0, eager_ms=3.0, compile_ms=2.0)
    r = reward_of(rec(workloads=[w]), cfg)
    assert r.value == pytest.approx(0.1 + 0.9 * (2 / 3)) and "speedup" in r.reason


def test_evaluator_failures_are_marked_invalid_not_learned():
    r = reward_of(rec(Status.RUNTIME_ERROR, message="the evaluator process died during the "
                      "candidate phase"))
    assert (r.stage, r.valid) == ("infra", False)
    assert reward_of(rec(Status.RUNTIME_ERROR, message="boom")).valid


def test_feedback_hides_held_out_workloads():
    seen = WorkloadResult(name="small", correct=True, time_ms=1.0, eager_ms=1.0)
    held = WorkloadResult(name="secret_shape_4096", visible=False, correct=False,
                          status=Status.INCORRECT_NUMERICAL, message="off at 4096")
    r = rec(Status.INCORRECT_NUMERICAL, workloads=[seen, held],
            message="workload secret_shape_4096: 12% of elements off")
    text = visible_feedback(r)
    assert "secret_shape" not in text and "4096" not in text
    assert "a held-out workload failed (INCORRECT_NUMERICAL)" in text and "small" in text


def test_tasks_parse_labels_and_default_to_the_kernel_languages():
    assert "pytorch" not in kernel_languages() and "triton" in kernel_languages()
    t = Task.parse("rmsnorm_llama3")
    assert t.accepted() == kernel_languages()
    assert Task.parse(t.label()) == t
    assert Task.parse('{"problem": "x", "languages": ["triton"]}').accepted() == ["triton"]
    for bad in ('{"problem": "x", "languages": ["go"]}', '{"problem": ""}', 3,
                '{"problem": "x", "path": "/etc/passwd"}'):
        with pytest.raises(TaskError):
            Task.parse(bad)


def test_extraction_takes_the_last_modelnew_block():
    text = ("Draft:\n```python\nclass ModelNew:\n    x = 1\n```\nFinal:\n```python\n"
            "import torch\nclass ModelNew:\n    x = 2\n```\n")
    assert extract_solution(text) == "import torch\nclass ModelNew:\n    x = 2\n"
    assert extract_solution("class ModelNew:\n    pass") == "class ModelNew:\n    pass\n"
    assert extract_solution("no code here") is None
    assert extract_solution("```python\nprint(1)\n```") is None


def test_wire_bodies():
    subs = parse_batch({"solutions": [{"label": "p", "completion": "x"},
                                      {"problem": "p", "solution": "y"}]})
    assert [s.task().problem for s in subs] == ["p", "p"] and subs[1].source() == "y"
    for bad in ({"problem": "p"}, {"problem": "p", "label": "p", "solution": "s"},
                {"problem": "p", "solution": "s", "completion": "c"}):
        with pytest.raises(ValueError):
            parse_batch(bad)
    req = OpenRLHFRequest(query=["PROMPT```python\nclass ModelNew: pass\n```"],
                          prompts=["PROMPT"], labels=[json.dumps({"problem": "p"})])
    assert req.submissions()[0].source() == "class ModelNew: pass\n"
    with pytest.raises(ValueError, match="labels"):
        OpenRLHFRequest(query=["a"])
