"""The Ray backend on a local Ray instance (CPU only): a two-worker search run over two
problems with its judges in a Ray actor, the actor killed in the middle of an evaluation,
and the same run on the local backend for its verdicts."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from solforge.orchestrate.backend import LocalBackend, make_backend
from solforge.orchestrate.planner import Planner, PlannerConfig
from solforge.orchestrate.run import Run, RunSpec
from tests.agents.conftest import fast_options
from tests.orchestrate.test_planner import RELU, TINY

ray = pytest.importorskip("ray")


def _search_run(tmp_path, name, backend, on_update=None):
    run = Run.create(tmp_path / name, RunSpec(agent="search"))
    settings = {"search": {"families": ["reference"], "explore_max_calls": 12}}
    config = PlannerConfig(agents=["search"], workers=2, max_units=1, final_rounds=1)
    planner = Planner(run, [RELU, TINY], config, fast_options(), settings,
                      on_update=on_update, backend=backend)
    result = planner.loop(poll_s=0.05)
    return result, run


def _verdicts(run: Run) -> dict[str, str]:
    return {r.problem: r.status.value for r in run.verdicts()}


def _why(run: Run) -> list[tuple[str, ...]]:
    """Every evaluation of the run as (problem, kind, status, judge fault, message), and
    how its units and workers ended: what a failed verdict comparison prints."""
    rows = [(r["problem"], r["kind"], r["record"]["status"],
             (r["record"].get("judge_fault") or "")[:200],
             (r["record"].get("message") or "")[:400]) for r in run.ledger.evaluations()]
    ends = ("worker_finished", "unit_failed", "final_verification", "winner_rejected")
    rows += [(e["problem"], e["kind"], str(e.get("data"))[:400])
             for e in run.ledger.events() if e["kind"] in ends]
    return rows


def _evaluations(run: Run) -> Counter:
    return Counter((r["problem"], r["kind"], r["record"]["status"])
                   for r in run.ledger.evaluations())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in f.read()
    except OSError:
        return False


def _kill_when_busy(backend, killed: list[int], left: list[int]) -> None:
    """Kill the cpu judge actor once an evaluation is under way in it; ``killed``: its
    judge processes, ``left``: those still alive a second later."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not killed:
        slot = backend.slots.get("cpu")
        if slot is not None and slot.in_flight > 0:
            judges = ray.get(slot.current()[0].where.remote())["judges"]
            time.sleep(0.3)  # inside the evaluation, not at its first byte
            if judges and slot.in_flight > 0:
                slot.kill()
                killed.extend(judges)
                time.sleep(1.0)  # the actor's orphan guard: its judges go with it
                left.extend(q for q in judges if _alive(q))
        time.sleep(0.02)


def test_ray_run_survives_a_killed_judge_actor_and_matches_the_local_run(tmp_path):
    backend = make_backend("ray", num_cpus=2)
    try:
        killed: list[int] = []
        left: list[int] = []
        killer = threading.Thread(target=_kill_when_busy, args=(backend, killed, left),
                                  daemon=True)
        killer.start()
        result, run = _search_run(tmp_path, "ray", backend)
        killer.join(timeout=5)
        replaced = backend.slots["cpu"].replaced
    finally:
        backend.close()
    assert killed, "no evaluation was ever seen under way in the judge actor"
    # the killed actor's judge processes (sessions of their own) went with it at once
    # rather than finishing their evaluation beside the actor that replaced it
    assert not left, (killed, left)
    assert result.status == "finished", result.reason
    assert replaced == 1
    rows = run.ledger.evaluations()
    keys = [(r["attempt"], r["kind"]) for r in rows]
    assert len(keys) == len(set(keys)), keys  # every evaluation recorded once
    # each evaluation under way in the killed actor (one per worker at most) ran again,
    # once, on its replacement, and passed: the loss is not the candidate's
    faulted = [r["record"] for r in rows if r["record"].get("judge_fault")]
    assert 1 <= len(faulted) <= 2, [r["record"].get("judge_fault") for r in rows]
    assert all("judge actor for cpu was lost" in f["judge_fault"] and
               f["judge_fault"].endswith("a new actor ran the evaluation again") and
               f["status"] == "PASSED" for f in faulted), faulted
    # the driver's paths and device names, not the actor's
    assert all(r["record"]["solution"].startswith(str(run.dir)) for r in rows)
    assert all(w["state"] == "done" for w in run.ledger.work())

    local_result, local = _search_run(tmp_path, "local", LocalBackend())
    assert local_result.status == "finished", local_result.reason
    passed = {"kb_relu": "PASSED", "tiny_linear": "PASSED"}
    assert _verdicts(run) == passed, _why(run)
    assert _verdicts(local) == passed, _why(local)
    assert _evaluations(run) == _evaluations(local)


def test_optimize_refuses_an_unknown_backend_in_one_line():
    from tests.cli.test_cli import sf
    from tests.conftest import PROBLEMS

    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--backend", "slurm", "--dry-run")
    assert r.returncode == 2 and "--backend slurm: use one of local, ray" in r.stdout, r.stdout
    r = sf("optimize", str(PROBLEMS / "kb_relu.py"), "--address", "auto",
           "--run-dir", str(PROBLEMS.parent / "never-created"))
    assert r.returncode == 2 and "--address goes with --backend ray" in r.stdout, r.stdout
    assert not (PROBLEMS.parent / "never-created").exists()
