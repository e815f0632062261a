"""Timing: fresh inputs per call, the kept outputs, and symmetric measurement of candidate
and reference (the same code measured on both sides comes out at about 1.0x)."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.bench.judge.reference_solution import reference_solution
from solforge.bench.measure.timing import TimingConfig, fresh_inputs, measure
from solforge.problems import load_problem
from tests.conftest import PROBLEMS


def test_fresh_inputs_new_values_new_storage_same_meaning():
    x = torch.randn(64, 33)
    idx = torch.randint(0, 10, (7,))
    mask = torch.rand(5) > 0.5
    a = fresh_inputs([x, idx, mask, 3.5], seed=1)
    b = fresh_inputs([x, idx, mask, 3.5], seed=1)
    c = fresh_inputs([x, idx, mask, 3.5], seed=2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])  # seeded, and fresh
    assert not torch.equal(a[0], x)
    assert (a[0] / x - 1).abs().max() <= 2.0**-4 + 1e-6  # a small relative change
    assert torch.equal(a[1], idx) and torch.equal(a[2], mask) and a[3] == 3.5
    assert a[0].data_ptr() != x.data_ptr() and a[1].data_ptr() != idx.data_ptr()
    f8 = x.to(torch.float8_e4m3fn)
    assert not torch.equal(fresh_inputs([f8], 3)[0].float(), f8.float())  # survives rounding


def test_fresh_inputs_is_the_perturbation_formula_to_the_bit_in_one_copy(tmp_path):
    """The factor is formed in place: the values of ``x * (1 + a * (2u - 1))`` to the bit
    (the judge recomputes timed calls' inputs), with no temporaries of the input's size
    beyond the copy for a contiguous fp32 input (the expression made four)."""
    from tests.bench.live_tensors import LiveTensors

    x = torch.randn(64, 1 << 14)  # 4 MiB
    for t in (x, x.t(), x[:, ::2], x.half(), x.bfloat16(), x.double(),
              x.to(torch.float8_e4m3fn)):
        g = torch.Generator().manual_seed(7 * 1_000_003)
        u = torch.rand(t.shape, generator=g)
        amp = 2.0**-2 if t.element_size() == 1 else 2.0**-4
        want = (t.float() * (1.0 + amp * (2.0 * u - 1.0))).to(t.dtype)
        (got,) = fresh_inputs([t], seed=7)
        assert got.stride() == t.stride() and got.dtype == t.dtype
        assert torch.equal(got.view(-1).view(torch.uint8), want.contiguous().view(-1)
                           .view(torch.uint8)) if got.is_contiguous() else \
            torch.equal(got.float(), want.float())
    with LiveTensors(str(tmp_path / "peaks.json")) as live:
        fresh_inputs([x], seed=7)
    assert live.peaks["all"]["all"] == 2 * x.numel() * 4  # the input and its copy alone


def test_measure_keeps_outputs_for_later_checks():
    calls = []

    def fn(a):
        calls.append(a.data_ptr())
        return a * 2

    pool = [[torch.randn(8)] for _ in range(3)]
    t = measure(fn, pool, torch.device("cpu"), TimingConfig(budget_ms=5, min_calls=10,
                                                          max_calls=10), retain_bytes=1 << 20)
    assert len(t.kernel_ms) == 10 and all(x > 0 for x in t.kernel_ms)
    assert sorted(t.outputs) == list(range(10))
    for i, out in t.outputs.items():
        want = fresh_inputs(pool[i % 3], t.perturb_seeds[i])[0] * 2
        assert torch.equal(out, want)
    small = measure(fn, pool, torch.device("cpu"), TimingConfig(budget_ms=5, min_calls=10,
                                                              max_calls=10), retain_bytes=40)
    assert sorted(small.outputs) == [9]  # room for one output: the newest is kept


@pytest.fixture(scope="module")
def tiny_ev():
    """One judge for the tiny_linear tests below, each passing its own budget: started in
    the first (not ``alone``), so the ``alone`` one does not start it while the other
    pytest-xdist worker waits."""
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], workloads=["small"])) as ev:
        yield ev


def test_the_floor_of_timed_calls_is_an_option(tiny_ev):
    """Ten timed calls at the least by default, whatever the budget; ``min_calls`` lowers
    the floor (a Triton kernel under the CPU interpreter takes seconds a call)."""
    p = load_problem(PROBLEMS / "tiny_linear.py")
    sol = reference_solution(p)
    default = tiny_ev.evaluate(p, sol, budget_ms=0.01, trials=1).workloads[0]
    three = tiny_ev.evaluate(p, sol, budget_ms=0.01, trials=1, min_calls=3).workloads[0]
    assert default.timed_calls == 10 and three.timed_calls == 3, (default, three)
    assert three.time_ms and three.eager_ms


@pytest.mark.alone  # a speed ratio on the CPU: no other worker's load
def test_reference_against_itself_is_about_one(tiny_ev):
    """No systematic bias between the runner's clock and the judge's baseline. A call
    takes 15-30 us here, where a loaded 2-core machine once gave one evaluation 0.49x
    (2026-12-02): a bias fails every one of three fresh evaluations (fresh baselines,
    interleaved), noise rarely does."""
    p = load_problem(PROBLEMS / "tiny_linear.py")
    seen = []
    for _ in range(3):
        w = tiny_ev.evaluate(p, reference_solution(p), budget_ms=200, rounds=3).workloads[0]
        seen.append((w.speedup_vs_eager, w.time_ms, w.eager_ms))
        if 0.6 < w.speedup_vs_eager < 1.6:
            break
    assert 0.6 < seen[-1][0] < 1.6, seen


@pytest.mark.alone  # a speed ratio on the CPU: no other worker's load
def test_a_fresh_runner_is_warm_on_every_workload():
    """The reference judged against itself on a fresh judge and runner, five times.

    What makes the first workload of a fresh runner honest on a CPU (0.61x on 2026-12-02,
    then 0.99x: a cached eager figure from another moment of the machine, and outputs the
    candidate's timing kept and the baselines' did not) is checked deterministically: every
    workload's eager figure is measured in its own evaluation, right after the candidate's
    timing (a "baseline" phase of kind eager after the "timing" phase of that workload), so
    no two evaluations share one. The ratio itself is checked only loosely (the median of
    five within 0.5-2.0): on the 2-core machine this project and CI run on, single figures
    ran from 0.46x to 1.89x inside the full suite and one median of five was 0.68, in both
    directions; alone, in quiet phases, the medians were within 1.00 +- 0.03
    (benchmarks/results/2026-12-03-cpu, where the issue's 0.03 is measured, not here)."""
    from solforge.problems.loader import find_builtin

    p = find_builtin("rmsnorm_llama3")
    seen: dict[str, list[float]] = {}
    eager: dict[str, list[float]] = {}
    order: list[list[tuple[str, str, str]]] = []

    def phases(msg):
        if msg.get("event") == "phase" or "phase" in msg:
            order[-1].append((str(msg.get("phase")), str(msg.get("workload", "")),
                              str(msg.get("kind", ""))))

    for _ in range(5):
        order.append([])
        with Evaluator(EvalOptions(device="cpu", baselines=["eager"], trials=1),
                       on_phase=phases) as ev:
            r = ev.evaluate(p, reference_solution(p))
        assert r.status.value == "PASSED", r.message
        for w in r.workloads:
            seen.setdefault(w.name, []).append(w.speedup_vs_eager)
            eager.setdefault(w.name, []).append(w.eager_ms)
            timing = order[-1].index(("timing", w.name, ""))
            assert ("baseline", w.name, "eager") in order[-1][timing:], order[-1]
    assert len(seen) >= 2, seen
    for name, xs in seen.items():
        # none cached (a cached figure would come back in all five); two fresh medians can
        # meet to the nanosecond: 0.025728 ms twice of five in a run of the suite
        assert len(set(eager[name])) >= len(eager[name]) - 1, (name, eager[name])
        med = sorted(xs)[len(xs) // 2]
        assert 0.5 <= med <= 2.0, (name, xs)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to one")
def test_threads_started_while_pinned_get_their_process_mask_back():
    from solforge.bench.measure import pinning

    mask = os.sched_getaffinity(0)
    seen: dict[str, set[int]] = {}
    go, done = threading.Event(), threading.Event()

    def worker():
        go.wait()
        seen["inside"] = os.sched_getaffinity(0)
        done.wait()
        seen["after"] = os.sched_getaffinity(0)

    with pinning.pinned([os.getpid()], "cpu") as core:
        t = threading.Thread(target=worker)  # started inside the block: inherits the core
        t.start()
        go.set()
        while "inside" not in seen:
            time.sleep(0.001)
    done.set()
    t.join()
    assert seen["inside"] == {core}
    assert seen["after"] == mask and os.sched_getaffinity(0) == mask
