"""A judge that fails in the middle of an evaluation (killed here; its CUDA context lost
on a GPU) is replaced and the evaluation runs once more: the run finishes with every
evaluation recorded once, and nothing is charged to the candidate."""

from __future__ import annotations

import os
import signal
import threading
import time

from solforge.agents.clients import make_client
from solforge.orchestrate.planner import Planner, PlannerConfig
from solforge.orchestrate.run import Run, RunSpec
from tests.agents.conftest import fast_options, model_config
from tests.agents.loopback import ScriptedServer
from tests.orchestrate.test_planner import TINY, brain


def _kill_first_judge_in(planner: Planner, phase: str, killed: list[int]) -> None:
    """SIGKILL the first worker's judge once it reports ``phase`` (mid-evaluation)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not killed:
        cached = planner.workers[0].evaluator
        ev = cached.inner if cached is not None else None
        proc = ev.proc if ev is not None else None
        if proc is not None and ev.phase == phase:
            os.kill(proc.pid, signal.SIGKILL)
            killed.append(proc.pid)
        time.sleep(0.005)


def test_a_judge_killed_mid_evaluation_is_replaced_and_each_evaluation_recorded_once(
        tmp_path):
    run = Run.create(tmp_path / "run", RunSpec(agent="llm"))
    killed: list[int] = []
    with ScriptedServer([brain] * 4) as s:
        settings = {"llm": {"model": model_config(s.base_url),
                            "client": make_client(model_config(s.base_url))}}
        p = Planner(run, [TINY], PlannerConfig(agents=["llm"], max_units=1, final_rounds=1),
                    fast_options(), settings)
        killer = threading.Thread(target=_kill_first_judge_in, args=(p, "candidate", killed),
                                  daemon=True)
        killer.start()
        result = p.loop(poll_s=0.05)
    assert not s.errors, s.errors
    assert killed, "the judge was never seen in the candidate phase"
    assert result.status == "finished", result.reason
    rows = run.ledger.evaluations()
    keys = [(r["attempt"], r["kind"]) for r in rows]
    assert len(keys) == len(set(keys)), keys  # recorded once each
    assert all(r["record"]["status"] == "PASSED" for r in rows), \
        [(r["kind"], r["record"]["status"], r["record"]["message"][:300]) for r in rows]
    faulted = [r["record"] for r in rows if r["record"].get("judge_fault")]
    assert len(faulted) == 1, [r["record"].get("judge_fault") for r in rows]
    assert "SIGKILL" in faulted[0]["judge_fault"] and "candidate phase" in \
        faulted[0]["judge_fault"]
    assert all("evaluator process" not in r["record"]["message"] for r in rows)
    assert {r["kind"] for r in rows} >= {"final"}
