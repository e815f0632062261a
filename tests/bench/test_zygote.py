"""CPU runners forked from the runner zygote: confined like exec'd ones and, to their
candidate, the same process; their exit status read the same way; the zygote's refusals
and death handled by exec'd runners."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from solforge import env
from solforge.bench.runner import forkstate, zygote
from solforge.bench.runner.confinement import SandboxConfig
from solforge.bench.runner.proctree import descendants
from solforge.bench.runner.sandbox import RunnerProcess
from solforge.bench.evaluator import Evaluator
from solforge.records.evaluation import Status
from solforge.records.options import EvalOptions
from tests.conftest import PROBLEMS, SOLUTIONS


@pytest.fixture(scope="module", autouse=True)
def _zygotes():
    """The module's tests share this process's zygote where a test leaves it standing
    (its start is about 3 CPU-seconds); closed at the end."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(env.RUNNER_FORK, raising=False)
        mp.setattr(zygote, "_STARTS", [0])
        zygote.close_all()
        yield
        zygote.close_all()


@pytest.fixture
def fresh_zygote(monkeypatch):
    """No zygote yet (the next CPU runner starts one), and room to start several."""
    zygote.close_all()
    monkeypatch.setattr(zygote, "_STARTS", [0])


def ready(r: RunnerProcess) -> dict:
    """Its first message, waited for as the judge's handle waits (looking at the process
    between polls of the channel)."""
    deadline = time.monotonic() + 120
    while not r.channel.poll(0.25):
        assert r.alive() and time.monotonic() < deadline, r.output.text()
    msg = r.channel.recv()
    assert msg["op"] == "ready", msg
    return msg


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_cpu_runners_are_forked_confined_and_hold_only_their_channel():
    first = RunnerProcess("cpu")
    second = RunnerProcess("cpu")
    try:
        for r in (first, second):
            assert ready(r)["pid"] == r.pid
            assert isinstance(r.proc, zygote.Forked) and r.proc.forked
            z = zygote._CURRENT[-1]
            assert parent_of(r.pid) == z.proc.pid  # the zygote's child, not ours
            assert r.pid in descendants(os.getpid())  # and under us, for the kill
            # its own session and directory (its environment: test_containment's
            # candidate that writes into its own directories); one socket: its channel
            assert os.getsid(r.pid) == r.pid
            assert os.readlink(f"/proc/{r.pid}/cwd") == str(r.workdir.resolve())
            fds = [os.readlink(f"/proc/{r.pid}/fd/{fd}") for fd in os.listdir(
                f"/proc/{r.pid}/fd")]
            assert sum(f.startswith("socket:") for f in fds) == 1, fds
        assert first.pid != second.pid
    finally:
        first.kill()
        second.kill()
    assert not first.alive() and not second.workdir.exists()


def test_a_forked_runners_exit_reads_as_an_execd_ones():
    crashed, clean = RunnerProcess("cpu"), RunnerProcess("cpu")
    ready(crashed)
    ready(clean)
    assert crashed.proc.forked and clean.proc.forked
    os.kill(crashed.pid, signal.SIGSEGV)
    crashed.proc.wait(timeout=30)
    assert crashed.describe_exit() == "killed by signal SIGSEGV"
    clean.channel.send({"op": "exit"})
    assert clean.channel.recv(timeout=30) == {"ok": True}
    assert clean.proc.wait(timeout=30) == 0 and clean.describe_exit() == "exited with code 0"
    crashed.kill()
    clean.kill()


def test_a_killed_zygote_takes_its_runners_and_is_replaced(fresh_zygote):
    idle = RunnerProcess("cpu")
    ready(idle)
    old = zygote._CURRENT[-1]
    old.proc.kill()  # a hardened root runner may signal it (same uid), as it may the judge
    idle.proc.wait(timeout=30)  # it died with its parent
    assert idle.describe_exit() == "killed by signal SIGKILL"
    idle.kill()
    after = RunnerProcess("cpu")  # the dead zygote is noticed: exec'd, and a new one starts
    ready(after)
    later = RunnerProcess("cpu")
    ready(later)
    assert later.proc.forked and zygote._CURRENT[-1] is not old
    after.kill()
    later.kill()


def test_runners_asked_for_before_the_zygote_died_are_execd(fresh_zygote):
    r = RunnerProcess("cpu")  # queued while the zygote still imports torch
    zygote._CURRENT[-1].proc.kill()
    assert ready(r)["pid"] == r.pid
    assert not r.proc.forked and isinstance(r.proc._popen, subprocess.Popen)
    r.kill()
    assert r.proc.returncode == -signal.SIGKILL


def test_off_by_the_knob_and_for_another_environment(fresh_zygote, monkeypatch):
    """Exec'd (that they serve is the evaluation test's, with the knob): with the knob at
    0 no zygote starts; a runner with an environment of its own, or one the zygote was not
    started with, does not use it."""
    monkeypatch.setenv(env.RUNNER_FORK, "0")
    off = RunnerProcess("cpu")
    assert isinstance(off.proc, subprocess.Popen) and not zygote._CURRENT
    monkeypatch.delenv(env.RUNNER_FORK)
    forked = RunnerProcess("cpu")
    # an environment of its own (a builder's), or one the zygote was not started with
    builder = RunnerProcess("cpu", SandboxConfig(extra_env={"TORCH_CUDA_ARCH_LIST": "9.0"}))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    other = RunnerProcess("cpu")
    assert isinstance(builder.proc, subprocess.Popen) and isinstance(other.proc,
                                                                     subprocess.Popen)
    for r in (off, builder, other):
        r.kill()
    ready(forked)
    assert forked.proc.forked and len(zygote._CURRENT) == 1
    forked.kill()


def test_a_thread_that_a_fork_would_lose_makes_the_zygote_refuse():
    """Only the forking thread survives a fork: a thread of a library that does not stop
    it in a fork handler (here a native one, started through ctypes) is counted, and so
    is any Python thread."""
    import ctypes
    import threading

    before = zygote._threads_past_a_fork()
    libc = ctypes.CDLL(None)
    gate_r, gate_w = os.pipe()

    def waits(_arg: int | None) -> None:
        os.read(gate_r, 1)

    waiter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(waits)
    tid = ctypes.c_ulong()
    assert libc.pthread_create(ctypes.byref(tid), None, waiter, None) == 0
    try:
        assert zygote._threads_past_a_fork() == before + 1
    finally:
        os.write(gate_w, b"x")
        libc.pthread_join(tid, None)
        os.close(gate_r)
        os.close(gate_w)
    stop = threading.Event()
    extra = threading.Thread(target=stop.wait)
    extra.start()
    try:
        assert "Python threads" in zygote.unfit("/nonexistent")
    finally:
        stop.set()
        extra.join()


def test_the_zygote_finds_module_state_holding_its_directory(monkeypatch):
    """A module that keeps a path of HOME, TMPDIR or a cache directory at import would
    send every forked runner's files into the zygote's directory: the zygote refuses."""
    own = f"/nonexistent/solforge-zygote-test-{os.getpid()}-{time.time_ns()}"
    assert forkstate.stray_paths(own) == []
    fake = types.ModuleType("solforge_test_keeps_a_path")
    holder = types.SimpleNamespace(cache=Path(own) / "cache" / "inductor")
    fake.STORE = {"default": [holder]}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    assert forkstate.stray_paths(own) == ["solforge_test_keeps_a_path.STORE.default.cache"]
    # places each child points at its own directory are not reasons
    monkeypatch.setattr(sys, "argv", [f"{own}/x.py"])
    monkeypatch.delitem(sys.modules, fake.__name__)
    assert forkstate.stray_paths(own) == []


def _probe(ev) -> dict:
    r = ev.evaluate(PROBLEMS / "tiny_linear.py", SOLUTIONS / "tiny_process_probe.py")
    assert r.status is Status.RUNTIME_ERROR and "PROBE " in r.message, r.message[:2000]
    return json.loads(r.message.split("PROBE ", 1)[1].split("\n", 1)[0])


def test_a_forked_runner_is_to_its_candidate_what_an_execd_one_is(monkeypatch):
    """The same candidates on a judge with forked runners and on one with exec'd runners
    (``SOLFORGE_RUNNER_FORK=0``): the probe candidate finds its process the same
    (identity, capabilities, limits, namespaces, mounts, descriptors, signal handlers,
    threads, environment, torch's settings), with no trace of an earlier candidate and
    fresh random generators in each forked sibling; an honest candidate passes on both."""
    opts = EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=120,
                       trials=2, seed=1)
    probes: dict[str, list[dict]] = {}
    for fork in ("1", "0"):
        monkeypatch.setenv(env.RUNNER_FORK, fork)  # read by the judge, which it inherits
        with Evaluator(opts) as ev:
            probes[fork] = [_probe(ev) for _ in range(2 if fork == "1" else 1)]
            good = ev.evaluate(PROBLEMS / "tiny_linear.py", SOLUTIONS / "tiny_good_pytorch.py")
        assert good.status is Status.PASSED, (fork, good.message)
    forked, again = probes["1"]
    execd = probes["0"][0]
    assert forked["parent"] == again["parent"] == "solforge.bench.runner.zygote"
    assert execd["parent"] == "solforge.bench.judge.process"
    assert not forked["earlier_candidate"] and not again["earlier_candidate"]
    # each forked runner's generators were seeded anew (an exec'd runner's are)
    assert forked["random"][0] != again["random"][0]
    assert forked["random"][1] != again["random"][1]
    differ = {k: (forked[k], execd[k]) for k in forked
              if k not in ("parent", "random") and forked[k] != execd[k]}
    assert not differ, json.dumps(differ, indent=1)
