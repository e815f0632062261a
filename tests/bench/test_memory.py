"""Device memory on the trusted side, with real processes: the cross-process admission
ledger, an out-of-memory beside a neighbour retried alone, an out-of-memory alone charged
with its figures, and a judge that cannot return to its idle level replaced.

On a CPU there is no device memory to run out of: the candidates here raise PyTorch's own
``OutOfMemoryError`` (what a CUDA allocation failure raises), and the neighbours are real
processes holding tickets on the same ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from solforge.bench.judge import admission
from solforge.bench.judge.admission import DeviceLedger, Sizes, footprint, input_sets
from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from tests.conftest import PROBLEMS, SOLUTIONS

TINY = PROBLEMS / "tiny_linear.py"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def slots(tmp_path, monkeypatch):
    """A ledger of this test's own: judges and neighbours started here share it."""
    d = tmp_path / "slots"
    d.mkdir()
    monkeypatch.setenv("SOLFORGE_SLOTS", str(d))
    return d


def neighbour(slots: Path, mb: float, until: str, marker: Path | None = None,
              alone_waiting: bool = False) -> subprocess.Popen:
    """A real process holding a ticket of ``mb`` on the CPU ledger until ``until`` (a
    file) exists, or, with ``alone_waiting``, until an evaluation waits to run alone;
    ``marker`` exists while it holds the ticket (what the crowded candidate looks for)."""
    code = textwrap.dedent(f"""
        import os, sys, time, json
        from pathlib import Path
        from solforge.bench.judge.admission import DeviceLedger
        led = DeviceLedger("cpu", capacity={mb * 4})
        t = led.admit({mb})
        marker = {str(marker) if marker else None!r}
        if marker:
            Path(marker).write_text("crowded")
        print("admitted", flush=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if Path({until!r}).exists():
                break
            if {alone_waiting!r}:
                try:
                    st = json.loads(Path(led.path).read_text())
                except (OSError, ValueError):
                    st = {{}}
                if st.get("alone_waiting"):
                    break
            time.sleep(0.05)
        if marker:
            os.unlink(marker)
        led.leave(t)
        print("left", time.time(), flush=True)
    """)
    env = {**os.environ, "SOLFORGE_SLOTS": str(slots),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "admitted"
    return p


# -- the ledger, across processes ------------------------------------------------------

def test_a_ticket_waits_until_it_fits_beside_another_process(slots, tmp_path):
    go = tmp_path / "go"
    other = neighbour(slots, 700, str(go))
    led = DeviceLedger("cpu", capacity=1000)
    small = led.admit(200)  # 700 + 200 fits
    assert small.neighbours == 1 and small.waited_s < 1.0
    led.leave(small)
    waits: list[bool] = []
    t0 = time.monotonic()
    # 700 + 600 does not fit: it waits, and the process's release lets it in
    subprocess.Popen(["sh", "-c", f"sleep 1; touch {go}"])
    big = led.admit(600, on_wait=waits.append)
    assert time.monotonic() - t0 >= 0.9
    assert waits == [True, False]
    assert big.neighbours == 0
    led.leave(big)
    assert other.wait(10) == 0


def test_an_alone_ticket_drains_the_device_and_keeps_newcomers_out(slots, tmp_path):
    other = neighbour(slots, 100, str(tmp_path / "never"), alone_waiting=True)
    led = DeviceLedger("cpu", capacity=10_000)
    alone = led.admit(100, alone=True)  # granted once the neighbour saw it wait and left
    left_at = float(other.communicate(timeout=10)[0].split()[-1])
    assert alone.neighbours == 0 and time.time() >= left_at
    # a newcomer that fits by size still waits while the device is held alone
    code = ("from solforge.bench.judge.admission import DeviceLedger; import time; "
            "t = DeviceLedger('cpu', capacity=10_000).admit(10); print(time.time())")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    late = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            text=True)
    time.sleep(1.5)
    released = time.time()
    led.leave(alone)
    admitted = float(late.communicate(timeout=20)[0].strip())
    assert admitted >= released


def test_tickets_of_a_killed_process_are_dropped(slots, tmp_path):
    other = neighbour(slots, 900, str(tmp_path / "never"))
    led = DeviceLedger("cpu", capacity=1000)
    assert len(led.tickets()) == 1
    other.send_signal(signal.SIGKILL)
    other.wait(10)
    t = led.admit(900, on_wait=lambda w: pytest.fail("waited for a dead process"))
    assert t.neighbours == 0
    led.leave(t)


def test_the_ticket_file_is_plain_json_a_user_can_read(slots):
    led = DeviceLedger("cpu", capacity=None)
    with led.admitted(123.4):
        state = json.loads(Path(led.path).read_text())
        (entry,) = state["tickets"].values()
        assert entry["pid"] == os.getpid() and entry["mb"] == 123.4


# -- sizes ---------------------------------------------------------------------------------

def test_large_problems_get_fewer_input_sets_never_none():
    h200 = 0.9 * 143_771  # MiB an H200 offers
    assert input_sets(Sizes(inputs_mb=64, weights_mb=64), h200) == 3
    # KernelBench level-1 sizes: inputs of several GiB
    assert input_sets(Sizes(inputs_mb=6_000, weights_mb=0), h200) == 2
    assert input_sets(Sizes(inputs_mb=12_000, weights_mb=0), h200) == 1
    assert input_sets(Sizes(inputs_mb=80_000, weights_mb=0), h200) == 1
    assert input_sets(Sizes(inputs_mb=80_000), None) == 3  # no capacity known: as before
    assert footprint(Sizes(inputs_mb=1000), 1) < footprint(Sizes(inputs_mb=1000), 3)


def test_sizes_are_counted_on_the_meta_device_without_allocating(tmp_path):
    from solforge.problems.loader import import_file

    src = tmp_path / "huge.py"
    src.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.w = nn.Parameter(torch.randn(n, n))  # 64 GiB on a real device
            def forward(self, x):
                return x @ self.w
        def get_inputs():
            return [torch.randn(1 << 15, 1 << 15)]   # 4 GiB
        def get_init_inputs():
            return [1 << 17]
        """))
    mod = import_file(src)
    t0 = time.monotonic()
    s = admission.estimate(mod, {}, [1 << 17])
    assert time.monotonic() - t0 < 5
    assert s.inputs_mb == pytest.approx(4096) and s.weights_mb == pytest.approx(65536)


# -- whole evaluations ---------------------------------------------------------------------

def crowded_solution(tmp_path: Path, marker: Path) -> Path:
    """tiny_linear's honest solution that runs out of memory while ``marker`` exists."""
    sol = tmp_path / "crowded.py"
    sol.write_text((SOLUTIONS / "tiny_good_pytorch.py").read_text().replace(
        "    def forward(self, x):\n",
        "    def forward(self, x):\n"
        f"        if __import__('os').path.exists({str(marker)!r}):\n"
        "            raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate "
        "2.00 GiB (a neighbour holds the device)')\n"))
    return sol


def options(**kw) -> EvalOptions:
    return EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=60, seed=3,
                       trials=2, workloads=["small"], **kw)


def test_out_of_memory_beside_a_neighbour_is_retried_alone_and_passes(slots, tmp_path):
    marker = tmp_path / "crowded"
    other = neighbour(slots, 100, str(tmp_path / "never"), marker=marker, alone_waiting=True)
    with Evaluator(options()) as ev:
        r = ev.evaluate(TINY, crowded_solution(tmp_path, marker))
    other.wait(10)
    assert r.status is Status.PASSED, r.message
    assert "out of memory" in r.retried_alone.lower()
    (w,) = r.workloads
    assert w.memory is not None and w.memory.alone and w.memory.neighbours == 0
    assert r.phase_seconds.get("memory_wait", 0) > 0  # it waited for the neighbour


def test_out_of_memory_alone_is_the_candidates_verdict_with_figures(slots, tmp_path):
    marker = tmp_path / "always"
    marker.write_text("x")  # no neighbour: the device is the candidate's alone
    with Evaluator(options()) as ev:
        r = ev.evaluate(TINY, crowded_solution(tmp_path, marker))
    assert r.status is Status.RUNTIME_ERROR
    assert r.retried_alone == ""
    assert r.message.startswith("out of memory alone on the device: the workload's "
                                "footprint is about"), r.message
    assert "timing input set" in r.message


def test_a_reference_out_of_memory_alone_is_an_invalid_reference(slots, tmp_path):
    prob = tmp_path / "oom_reference.py"
    prob.write_text(TINY.read_text().replace('"name": "tiny_linear"', '"name": "oom_ref"')
                    .replace("        return torch.nn.functional.gelu(self.fc(x)) * self.scale",
                             "        raise torch.OutOfMemoryError('CUDA out of memory. Tried "
                             "to allocate 90.00 GiB')"))
    with Evaluator(options()) as ev:
        r = ev.evaluate(prob, SOLUTIONS / "tiny_good_pytorch.py")
    assert r.status is Status.INVALID_REFERENCE
    assert "out of memory alone on the device" in r.message
    assert "does not fit" in r.message


STASH = '''
        stash = torch.__dict__.setdefault("_solforge_test_stash", [])
        if not stash:  # a library cache that outlives the evaluation: 64 MiB in the judge
            stash.append(torch.zeros(16 << 20))
'''


def test_a_judge_that_keeps_memory_is_replaced_and_a_clean_one_stays_flat(
        slots, tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_JUDGE_SLACK_MB", "32")
    prob = tmp_path / "stash.py"
    prob.write_text(TINY.read_text().replace('"name": "tiny_linear"', '"name": "stash"')
                    .replace("    def forward(self, x):\n", "    def forward(self, x):\n"
                             + STASH))
    good = SOLUTIONS / "tiny_good_pytorch.py"
    with Evaluator(options()) as ev:
        clean = [ev.evaluate(TINY, good) for _ in range(3)]
        pids = {r.judge_memory.pid for r in clean}
        assert len(pids) == 1 and all(r.status is Status.PASSED for r in clean)
        idle = [r.judge_memory.idle_before_mb for r in clean]
        assert max(idle) - min(idle) < 1.0, idle  # flat: nothing kept between evaluations
        leaky = ev.evaluate(prob, good)
        assert leaky.status is Status.PASSED and leaky.judge_memory.pid in pids
        after = ev.evaluate(TINY, good)
    assert after.status is Status.PASSED, after.message
    assert after.judge_memory.pid not in pids  # a new judge took the next evaluation
    assert "still held" in after.judge_memory.replaced_before
    assert after.judge_memory.idle_before_mb < 1.0


def test_start_up_objects_are_frozen_and_later_garbage_and_tensors_are_still_seen():
    """``runner.process.freeze_imports`` (the judge before its first evaluation, a runner zygote
    before its forks): the collector stops walking the start-up objects, so each
    release's full collection is short, while what an evaluation makes later is still
    counted by ``live_tensor_mb`` and still collected by ``release``. In a process of its
    own: a frozen pytest worker would hide its objects from the other tests."""
    script = textwrap.dedent("""
        import gc, json
        import torch
        from solforge.bench.judge import memory
        from solforge.bench.runner.process import freeze_imports

        before = len(gc.get_objects())
        freeze_imports()
        after = len(gc.get_objects())
        cycle = {"t": torch.ones(4 << 20)}  # 16 MiB, kept alive by a cycle only
        cycle["self"] = cycle
        held = memory.live_tensor_mb("cpu")
        del cycle
        memory.release("cpu")
        print(json.dumps({"before": before, "after": after, "frozen": gc.get_freeze_count(),
                          "held": held, "released": memory.live_tensor_mb("cpu")}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] > 50_000 and got["frozen"] >= got["before"] // 2, got
    assert got["after"] < got["before"] // 10, got  # what a collection still walks
    assert got["held"] >= 16 and got["released"] < 1, got
