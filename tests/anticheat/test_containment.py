"""Containment, tested by candidates that try to get out (CPU, real sandboxed runners).

(The candidate that rewrites the installed package, torch and the home is in
``test_guard.py``: it runs on a copy of the package.)

Probe hacks raise an exception whose message says what they could reach; the record
carries it. Faults (fork bomb, host memory, output flood) must be recorded with a clear
status and message, fast, and the next evaluation must run normally. Where this machine
lacks a facility (no network namespace, not root) the test says so and skips that part.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from solforge.bench.runner import caches
from solforge.bench.runner.sandbox import capabilities, hardened

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HACKS = FIXTURES / "hacks"
SOLUTIONS = FIXTURES / "solutions"
TINY = FIXTURES / "problems" / "tiny_linear.py"
GOOD = SOLUTIONS / "tiny_good_pytorch.py"
SECRET = "sk-solforge-test-0123456789abcdef"


# one evaluation after another on one judge: the next runner starts during the current one
pytestmark = pytest.mark.usefixtures("two_spares")


@pytest.fixture(scope="module")
def ev():
    old = os.environ.get("SOLFORGE_TEST_API_KEY")
    os.environ["SOLFORGE_TEST_API_KEY"] = SECRET  # the caller (an agent) holds a key
    try:
        with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60,
                                   timeout_s=60, seed=3, memory_mb=1536)) as e:
            yield e
    finally:
        if old is None:
            os.environ.pop("SOLFORGE_TEST_API_KEY", None)
        else:
            os.environ["SOLFORGE_TEST_API_KEY"] = old


@pytest.fixture(scope="module")
def caps():
    return capabilities()


def _probe(ev, name: str) -> str:
    r = ev.evaluate(TINY, HACKS / name)
    assert r.status is Status.RUNTIME_ERROR, (r.status, r.message[:500])
    assert "PROBE" in r.message, r.message[:500]
    return r.message.split("PROBE", 1)[1].split("\n", 1)[0]


def test_secrets_are_not_reachable(ev, caps):
    seen = _probe(ev, "steal_secrets.py")
    assert SECRET not in seen and "SOLFORGE_TEST_API_KEY" not in seen, seen
    # it found the judge (the parent of an exec'd runner, the grandparent of a forked one)
    assert f"judge pid {ev.proc.pid}:" in seen, (ev.proc.pid, seen)
    assert "own secrets=[]" in seen
    if caps["root"] and hardened("cpu"):
        # no capabilities: neither the (non-dumpable) judge's nor the caller's environ
        assert seen.count("blocked") == 2, seen


def test_judge_memory_is_not_readable(ev, caps):
    seen = _probe(ev, "read_judge_memory.py")
    if not caps["root"] and not caps["drop_privileges"]:
        pytest.skip("runner and judge share an unprivileged uid here; the judge is "
                    f"non-dumpable, probe said: {seen}")
    assert "blocked" in seen and "bytes" not in seen, seen
    assert "listed" not in seen, seen  # nor a spare runner's files
    # the judge was the target, and the judge's other runner processes were found (two
    # spares, or the runner zygote and its spares)
    assert f"judge (pid {ev.proc.pid}) memory: blocked" in seen, (ev.proc.pid, seen)
    assert "memory blocked" in seen.split("spare runner:", 1)[1], seen


def test_network_is_unreachable(ev, caps):
    if not caps["network_namespace"]:
        pytest.skip("this machine cannot give the runner a network namespace")
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 47123))
    except OSError:
        pytest.skip("port 47123 is taken")
    listener.listen(1)
    try:
        seen = _probe(ev, "network_exfiltration.py")
    finally:
        listener.close()
    assert "connected" not in seen and seen.count("blocked") == 2, seen


def _next_passes(ev) -> None:
    r = ev.evaluate(TINY, GOOD)
    assert r.status is Status.PASSED, r.message


def test_fork_bomb_is_contained(ev):
    t0 = time.monotonic()
    r = ev.evaluate(TINY, SOLUTIONS / "tiny_fork_bomb.py")
    assert r.status is Status.RUNTIME_ERROR, r.message
    # stopped by the process limit, or (on a loaded machine, the forks having grown first)
    # by the memory limit of the whole process tree: either way the tree is named
    assert any(s in r.message for s in ("process limit", "fork", "processes")), r.message
    assert time.monotonic() - t0 < 45
    _next_passes(ev)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit()
            and "tiny_fork_bomb" in _cmdline(p)]
    assert not left


def _cmdline(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_host_memory_exhaustion_is_recorded(ev):
    t0 = time.monotonic()
    r = ev.evaluate(TINY, SOLUTIONS / "tiny_memory_hog.py")
    assert r.status is Status.RUNTIME_ERROR, r.message
    assert "memory" in r.message, r.message
    assert time.monotonic() - t0 < 45
    _next_passes(ev)


def test_output_flood_is_cut_off(ev):
    t0 = time.monotonic()
    r = ev.evaluate(TINY, SOLUTIONS / "tiny_output_flood.py")
    assert r.status is Status.RUNTIME_ERROR, r.message
    assert "output flood" in r.message and "flood flood" in r.message
    assert len(r.message) < 9000
    assert time.monotonic() - t0 < 45
    _next_passes(ev)


def test_own_directories_and_build_caches_stay_writable_and_are_kept_per_candidate(ev, caps):
    """A runner writes and reads its working directory, HOME, TMPDIR, /dev/shm and every
    build cache (Triton, torch extensions, inductor, NVRTC); the next runner of the same
    candidate finds its caches again, and no other candidate's store holds them."""
    own = SOLUTIONS / "tiny_own_dirs.py"
    first = ev.evaluate(TINY, own)
    assert first.status is Status.PASSED, first.message
    if caps["fs_view"]:
        assert first.containment == "", first.containment
    store = caches.store(caches.key(own))
    assert not (store / "triton" / "seen").exists()
    second = ev.evaluate(TINY, own)
    assert second.status is Status.PASSED, second.message
    assert (store / "triton" / "seen").read_text() == "inductor,nvrtc,torch_extensions,triton"
    other = caches.store(caches.key(GOOD))
    assert not list(other.rglob("tiny_own_dirs.marker"))


def test_a_candidate_that_kills_the_judge_earns_its_record(ev):
    """The first judge's death is not charged (a new judge runs the evaluation again);
    the candidate kills that one too, so the record is its own: RUNTIME_ERROR."""
    r = ev.evaluate(TINY, HACKS / "kill_judge.py")
    assert r.status is Status.RUNTIME_ERROR, r.message
    if "PermissionError" not in r.message:  # a dropped uid cannot signal the judge
        assert "SIGKILL" in r.judge_fault and "second judge" in r.message, \
            (r.judge_fault, r.message[:600])


def test_a_candidate_that_stops_the_runner_zygote_delays_no_other(ev):
    """A runner of uid 0 may stop its parent, the zygote that forks the next runners and
    reaps them: the judge continues it before each request and each wait for a runner's
    exit, so neither this evaluation's end (a 10 s wait for the runner's exit status
    otherwise) nor the next candidate's runner (30 s before it is exec'd instead) waits
    for it, and the next evaluations pass."""
    r = ev.evaluate(TINY, HACKS / "stop_zygote.py")
    assert r.status is Status.RUNTIME_ERROR and "PROBE" in r.message, r.message[:500]
    seen = r.message.split("PROBE", 1)[1].split("\n", 1)[0]
    assert "stopped the zygote" in seen or "PermissionError" in seen or \
        "not forked" in seen, seen
    assert r.phase_seconds["closing"] < 5, r.phase_seconds
    for _ in range(2):  # the spare forked before the stop, then one forked after it
        t0 = time.monotonic()
        _next_passes(ev)
        assert time.monotonic() - t0 < 20, seen
