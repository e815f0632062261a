"""The CPU clock check's bars (``probes.clock_gap``): a busy host's noise on a tiny honest
call passes, a rewritten time is flagged whatever the call's size."""

from __future__ import annotations

from solforge.bench.judge.probes import clock_gap
from solforge.records.evaluation import WorkloadResult

# the reference's own clocks (baseline figures as the judge keeps them): about 1:1
BASE = {"eager": {"kernel_ms": 0.008, "latency_ms": 0.009, "host_ms": 0.009}}


def _res(time_ms: float, host_ms: float) -> WorkloadResult:
    return WorkloadResult(name="w", time_ms=time_ms, host_ms=host_ms)


def test_a_tiny_honest_call_on_a_busy_host_is_not_flagged():
    # seen: 0.00796 ms timed, 0.0305 ms on the judge's batch, four processes on two cores
    assert clock_gap(_res(0.00796, 0.0305), BASE, "cpu") is None


def test_a_rewritten_time_is_flagged_small_or_large():
    flag = clock_gap(_res(0.0002, 0.02), BASE, "cpu")       # 100x on a tiny call
    assert flag is not None and flag[0] == "timing_mismatch"
    flag = clock_gap(_res(0.5, 2.0), BASE, "cpu")           # 4x with a 1.5 ms gap
    assert flag is not None and flag[0] == "timing_mismatch"


def test_a_moderate_ratio_counts_only_when_the_gap_is_large():
    assert clock_gap(_res(0.01, 0.05), BASE, "cpu") is None   # 5x, 0.04 ms: noise-sized
    assert clock_gap(_res(0.05, 0.25), BASE, "cpu") is not None  # 5x, 0.2 ms
