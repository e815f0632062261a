"""The device slot's two modes, with real processes on real lock files: shared holds (the
GPU correctness trials) run beside each other, an exclusive hold (a timing) runs beside
nothing, and an exclusive request that waits keeps new shared holders out."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from solforge.bench.measure import slots


@pytest.fixture(autouse=True)
def own_slots(tmp_path, monkeypatch):
    # a directory of this test's own: no other process's holds, and children inherit it
    monkeypatch.setenv(slots.SLOTS_ENV, str(tmp_path / "slots"))


def hold(device: str, seconds: float, shared: bool) -> subprocess.Popen:
    """A process that asks for ``device``'s slot and keeps it ``seconds``; it prints
    ``held`` once it has it."""
    code = ("import time\nfrom solforge.bench.measure import slots\n"
            f"with slots.device_slot({device!r}, shared={shared!r}):\n"
            "    print('held', flush=True)\n"
            f"    time.sleep({seconds})\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})


def wait_held(p: subprocess.Popen) -> None:
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "held"


def two_shared(device: str, seconds: float) -> None:
    """Two processes holding ``device``'s slot shared for ``seconds`` each, started
    together; returns once both ended (each got it while the other held it)."""
    a, b = hold(device, seconds, True), hold(device, seconds, True)
    wait_held(a)
    wait_held(b)
    a.wait(10)
    b.wait(10)


def test_shared_holders_run_beside_each_other():
    t0 = time.time()
    two_shared("cuda:5", 2.0)
    ivs = sorted(slots.held_intervals("cuda:5", since=t0, shared=True))
    assert len(ivs) == 2
    (s1, e1), (s2, e2) = ivs
    assert s2 < e1 - 1.0, ivs  # overlapped by more than a second
    assert slots.held_intervals("cuda:5", since=t0, shared=False) == []


def test_an_exclusive_hold_waits_for_shared_holders_and_keeps_them_out():
    a = hold("cuda:4", 2.0, True)
    wait_held(a)
    t = time.monotonic()
    with slots.device_slot("cuda:4") as waited:
        began = time.time()
        assert waited > 1.0 and time.monotonic() - t > 1.0
        a.wait(10)
        (_, a_end), = slots.held_intervals("cuda:4", shared=True)
        assert a_end <= began + 0.05  # the shared holder was done before this began
        b = hold("cuda:4", 0.1, True)
        time.sleep(1.5)
        assert b.poll() is None  # still waiting: an exclusive hold runs beside nothing
    wait_held(b)
    b.wait(10)


def test_a_waiting_exclusive_request_goes_before_later_shared_ones():
    """Without the gate a stream of overlapping trials would starve a timing forever."""
    t0 = time.time()
    first = hold("cuda:3", 2.0, True)
    wait_held(first)
    timing = hold("cuda:3", 1.0, False)  # waits for `first`, closes the gate meanwhile
    time.sleep(0.5)
    later = hold("cuda:3", 0.1, True)  # could join `first` at once, were the gate open
    for p in (first, timing, later):
        p.wait(15)
    shared = sorted(slots.held_intervals("cuda:3", since=t0, shared=True))
    (ex_start, ex_end), = slots.held_intervals("cuda:3", since=t0, shared=False)
    assert len(shared) == 2
    assert shared[0][1] <= ex_start + 0.05  # the timing began after the first trials ended
    assert shared[1][0] >= ex_end - 0.05    # and the later trials after the timing


def test_an_exclusive_request_refused_inside_its_own_shared_hold():
    with slots.device_slot("cuda:2", shared=True):
        with slots.device_slot("cuda:2", shared=True) as waited:  # nested shared: fine
            assert waited == 0.0
        with pytest.raises(RuntimeError, match="held shared"):
            with slots.device_slot("cuda:2"):
                pass
    with slots.device_slot("cuda:2"):  # either kind nests inside an exclusive hold
        with slots.device_slot("cuda:2", shared=True) as waited:
            assert waited == 0.0


def test_a_timed_out_exclusive_request_opens_the_gate_again():
    a = hold("cuda:1", 2.5, True)
    wait_held(a)
    with pytest.raises(TimeoutError):
        with slots.device_slot("cuda:1", timeout_s=0.3):
            pass
    # the gate it held while waiting is open: a shared request joins `a` at once
    with slots.device_slot("cuda:1", shared=True) as waited:
        assert waited < 0.5
        assert a.poll() is None
    a.wait(10)


def test_the_slot_log_says_how_busy_the_device_was(tmp_path):
    """``benchmarks/slot_log.py`` over a real log: what was held exclusively, shared, at
    all, and how much the shared holds overlapped."""
    import json

    t0 = time.time()
    two_shared("cuda:6", 1.0)
    with slots.device_slot("cuda:6"):
        time.sleep(0.5)
    log = slots.slots_dir() / "cuda_6.log"
    out = tmp_path / "busy.json"
    r = subprocess.run([sys.executable, "benchmarks/slot_log.py", str(log), "--since",
                        str(t0), "--json", str(out)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0, r.stderr
    busy = json.loads(out.read_text())
    assert busy["holds"] == 3
    assert 0.45 < busy["exclusive_s"] < 0.7
    assert 0.9 < busy["shared_s"] < 1.6          # the two shared holds, counted once
    assert busy["shared_overlap_s"] > 0.5        # they ran side by side
    assert abs(busy["held_s"] - busy["exclusive_s"] - busy["shared_s"]) < 0.01  # never both
    assert 0 < busy["busy_fraction"] <= 1.0
    # the covered seconds of overlapping intervals count once
    assert slots.covered_seconds([(0, 2), (1, 3), (5, 6)], 0, 10) == 4
    assert slots.covered_seconds([(0, 2), (1, 3)], 1.5, 2.5) == 1.0
