"""Each evaluation status, produced by a real candidate in a real sandboxed runner."""

from __future__ import annotations

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from tests.conftest import FIXTURES, PROBLEMS, SOLUTIONS

TINY = PROBLEMS / "tiny_linear.py"
HACKS = FIXTURES / "hacks"
# one evaluation after another on one judge: the next runner starts during the current one
pytestmark = pytest.mark.usefixtures("two_spares")


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60, timeout_s=60,
                               seed=1)) as e:
        yield e


def run(ev, solution, problem=TINY, **kw):
    return ev.evaluate(problem, SOLUTIONS / solution, **kw)


def test_passed_pytorch(ev):
    r = run(ev, "tiny_good_pytorch.py")
    assert r.status is Status.PASSED, r.message
    assert r.language == "pytorch"
    assert [w.name for w in r.workloads] == ["small", "held"]
    for w in r.workloads:
        assert w.correct and w.trials == 5
        assert w.time_ms > 0 and w.eager_ms > 0 and w.speedup_vs_eager > 0
        assert w.max_abs_error < 1e-4
        assert w.latency_ms is not None and w.host_ms is not None
    assert r.speedup_vs_eager is not None
    assert r.to_json()["schema"] == "solforge.evaluation/1"
    # where the time went, phase by phase, adding up to about the whole evaluation
    assert {"reference", "candidate", "timing", "host_clock", "sol"} <= set(r.phase_seconds), \
        r.phase_seconds
    # the runner's own time per operation, for diagnosis
    assert {"load", "run", "time"} <= set(r.runner_seconds), r.runner_seconds
    assert r.runner_seconds["time"] > 0
    assert all(v >= 0 for v in r.phase_seconds.values())
    assert sum(r.phase_seconds.values()) <= r.duration_s + 1.0


def test_passed_triton_under_interpreter(ev):
    r = run(ev, "tiny_good_triton.py")
    assert r.status is Status.PASSED, r.message
    assert r.language == "triton"


@pytest.mark.parametrize("solution, needle", [
    ("tiny_syntax_error.py", "SyntaxError"),
    ("tiny_import_error.py", "solforge_module_that_does_not_exist"),
    ("tiny_no_modelnew.py", "no ModelNew"),
])
def test_compile_errors(ev, solution, needle):
    r = run(ev, solution)
    assert r.status is Status.COMPILE_ERROR
    assert needle in r.message


def test_runtime_error_exception(ev):
    r = run(ev, "tiny_raises.py")
    assert r.status is Status.RUNTIME_ERROR
    assert "kernel launch configuration is wrong" in r.message


def test_segfault_is_recorded_and_next_evaluation_runs(ev):
    r = run(ev, "tiny_segfault.py")
    assert r.status is Status.RUNTIME_ERROR
    assert "SIGSEGV" in r.message
    assert run(ev, "tiny_good_pytorch.py").status is Status.PASSED


def test_exit_early_with_fake_pass_line(ev):
    r = run(ev, HACKS / "fake_pass_line.py")
    assert r.status is Status.RUNTIME_ERROR
    assert "exited with code 0" in r.message


def test_timeout(ev):
    r = run(ev, "tiny_infinite_loop.py", timeout_s=4)
    assert r.status is Status.TIMEOUT
    assert run(ev, "tiny_good_pytorch.py").status is Status.PASSED


@pytest.mark.parametrize("solution, status", [
    ("tiny_wrong_shape.py", Status.INCORRECT_SHAPE),
    ("tiny_wrong_dtype.py", Status.INCORRECT_DTYPE),
    ("tiny_wrong_values.py", Status.INCORRECT_NUMERICAL),
])
def test_incorrect(ev, solution, status):
    r = run(ev, solution)
    assert r.status is status, r.message
    assert not r.workloads[0].correct


def test_numerical_error_statistics_recorded(ev):
    r = run(ev, "tiny_wrong_values.py")
    w = r.workloads[0]
    assert w.max_abs_error is not None and w.max_abs_error > 1e-4
    assert w.mismatch_ratio > 0


@pytest.mark.parametrize("solution, flag", [
    ("lazy_output.py", "lazy_output"),
    ("mutates_input.py", "input_mutation"),
    ("stale_after_trials.py", "timed_output_mismatch"),
    ("patch_timer.py", "harness_patched"),
])
def test_reward_hacks(ev, solution, flag):
    r = run(ev, HACKS / solution)
    assert r.status is Status.REWARD_HACK, r.message
    assert flag in r.flags


def test_invalid_reference_random_forward(ev):
    r = run(ev, "tiny_good_pytorch.py", problem=PROBLEMS / "random_forward.py")
    assert r.status is Status.INVALID_REFERENCE
    assert "two different answers" in r.message


def test_reference_differing_only_in_rounding_is_usable(ev):
    """Last-bit differences between two runs of the reference (atomics, split reductions)
    are within the tolerance: the reference is used, and the record says so."""
    r = run(ev, "reorder_sum_plain.py", problem=PROBLEMS / "reorder_sum.py", timing=False)
    assert r.status is Status.PASSED, r.message
    assert "not bitwise deterministic" in r.workloads[0].message, r.workloads[0].message


def test_more_accurate_candidate_passes_by_float64_arbitration(ev):
    """A candidate beyond the tolerance from a reference whose own rounding error is larger
    still passes when it is the closer of the two to a float64 run of the reference, in
    every trial and in the timed calls' checks; the record says how it was judged."""
    r = run(ev, "cancelling_sum_exact.py", problem=PROBLEMS / "cancelling_sum.py")
    assert r.status is Status.PASSED, r.message
    w = r.workloads[0]
    assert "float64 arbitration: trial 1 differs from the reference" in w.message, w.message
    assert w.message.count("float64 arbitration") == 1, w.message
    # the statistics stay those against the reference: far beyond 1e-4 on most rows
    assert w.max_abs_error > 0.1 and w.mismatch_ratio > 0.5
    assert w.golden_max_abs_error < 1e-4 < 0.1 < w.reference_golden_max_abs_error


def test_less_accurate_candidate_is_not_rescued_by_float64_arbitration(ev):
    r = run(ev, "cancelling_sum_off.py", problem=PROBLEMS / "cancelling_sum.py")
    assert r.status is Status.INCORRECT_NUMERICAL, r.message
    assert "further from it than the reference" in r.workloads[0].message


def test_invalid_reference_broken_problem_file(ev):
    r = run(ev, "tiny_good_pytorch.py", problem=PROBLEMS / "broken_syntax.py")
    assert r.status is Status.INVALID_REFERENCE
    assert "SyntaxError" in r.message


def test_held_out_workloads_only_in_full_verdict(ev):
    r = run(ev, "tiny_good_pytorch.py", workloads="visible")
    assert [w.name for w in r.workloads] == ["small"]
    assert not r.held_out_included
    r = run(ev, "tiny_good_pytorch.py")
    assert "held" in [w.name for w in r.workloads] and r.held_out_included


def test_plain_kernelbench_file(ev):
    from solforge.bench.judge.reference_solution import reference_solution
    from solforge.problems import load_problem

    p = load_problem(PROBLEMS / "kb_relu.py")
    assert p.source == "kernelbench" and p.kernelbench_plain
    assert [w.name for w in p.workloads] == ["default"]
    r = ev.evaluate(p, reference_solution(p))
    assert r.status is Status.PASSED, r.message
    assert r.workloads[0].params == {}


def test_cuda_cpp_compile_error_found_without_gpu(ev):
    r = run(ev, "tiny_nvrtc_bad.py")
    assert r.language == "cuda_cpp"
    assert r.status is Status.COMPILE_ERROR
    assert "NVRTC" in r.message and "expected" in r.message


def hold_slot(device: str, seconds: float):
    """A process that holds ``device``'s slot for ``seconds``; returns once it holds it."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom solforge.bench.measure import slots\n"
         f"with slots.device_slot({device!r}):\n    print('held', flush=True)\n"
         f"    time.sleep({seconds})\n"],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_wait_for_the_devices_slot_is_its_own_phase_and_not_the_candidates_time(
        tmp_path, monkeypatch):
    """With four search workers on one H200, 10-45 s of an evaluation's candidate, policy
    and timing phases were waits for the slot other workers held, and the search budget
    charged them to the candidate: the wait is now the ``slot_wait`` phase. With six
    workers the waits reached 190 s and spent the candidate's ``timeout_s`` on the wall
    clock: the judge's deadlines now run on ``slots.clock``, which stands still while it
    waits, so a slot held past the time limit does not time an honest candidate out.
    (The holder keeps the slot 15 s: longer than a warm evaluator takes to reach its first
    wait plus the candidate's 5 s limit, so the candidate waits more than it. The slot is
    one of a directory of this test's own, with an evaluator of its own: the machine's
    CPU slot held 15 s stalled the other pytest-xdist worker's timings as long.)"""
    import time

    from solforge.search.budget import CHARGED_PHASES

    monkeypatch.setenv("SOLFORGE_SLOTS", str(tmp_path))  # the judge and the holder's
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60, timeout_s=60,
                               seed=1)) as own:
        # warm, as the module's evaluator is: a cold one's first runner may still be
        # starting when the candidate's 5 s run out
        assert run(own, "tiny_good_pytorch.py").status is Status.PASSED
        holder = hold_slot("cpu", 15)
        try:
            t0 = time.monotonic()
            r = run(own, "tiny_good_pytorch.py", timeout_s=5)
            assert r.status is Status.PASSED, r.message
            assert time.monotonic() - t0 > 5.0
        finally:
            holder.wait(timeout=60)
    assert r.phase_seconds.get("slot_wait", 0.0) > 5.0, r.phase_seconds
    assert "slot_wait" not in CHARGED_PHASES
    # the phases the wait interrupted are still there
    assert {"candidate", "timing", "host_clock"} <= set(r.phase_seconds), r.phase_seconds


def test_slot_clock_stands_still_while_waiting(tmp_path, monkeypatch):
    import time

    from solforge.bench.measure import slots

    monkeypatch.setenv("SOLFORGE_SLOTS", str(tmp_path))
    holder = hold_slot("cuda:7", 3)
    try:
        c0, t0 = slots.clock(), time.monotonic()
        with slots.device_slot("cuda:7") as waited:
            assert waited > 1.5
        assert time.monotonic() - t0 >= waited
        assert slots.clock() - c0 < time.monotonic() - t0 - waited + 0.5
    finally:
        holder.wait(timeout=30)


def test_the_judges_own_work_stops_the_candidates_clock_once(tmp_path, monkeypatch):
    """Baselines compiled by the judge (177 s on the H200 once) are not the candidate's
    time; a slot wait inside such a block is not taken off twice (the clock never runs
    backwards)."""
    import time

    from solforge.bench.measure import slots

    c0 = slots.clock()
    with slots.not_the_candidates_time():
        time.sleep(0.4)
        with slots.not_the_candidates_time():
            time.sleep(0.3)
    assert abs(slots.clock() - c0) < 0.15
    time.sleep(0.3)
    assert slots.clock() - c0 > 0.25  # running again after the block

    monkeypatch.setenv("SOLFORGE_SLOTS", str(tmp_path))
    holder = hold_slot("cuda:6", 2)
    try:
        c1, t1 = slots.clock(), time.monotonic()
        with slots.not_the_candidates_time():
            with slots.device_slot("cuda:6") as waited:
                assert waited > 1.0
        assert time.monotonic() - t1 > 1.0
        assert -0.05 < slots.clock() - c1 < 0.15  # stood still, once
    finally:
        holder.wait(timeout=30)
