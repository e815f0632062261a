"""Record fields (annotate) and the suite summary on hand-made records."""

from __future__ import annotations

import math

import pytest

from solforge.records.evaluation import EvaluationRecord, Status, WorkloadResult, speedup_vs_best
from solforge.sol import (
    Work,
    annotate,
    baseline_time,
    load_profile,
    summarize,
)

H200 = "NVIDIA H200"


def _wl(name="w", time_ms=1.0, eager_ms=2.0, compile_ms=1.5, correct=True, sol_ms=None,
        **extra) -> WorkloadResult:
    return WorkloadResult(name=name, time_ms=time_ms, eager_ms=eager_ms, compile_ms=compile_ms,
                          correct=correct, sol_ms=sol_ms,
                          speedup_vs_eager=eager_ms / time_ms if time_ms else None,
                          speedup_vs_compile=compile_ms / time_ms if time_ms else None, **extra)


def _record(problem, workloads, status=Status.PASSED) -> EvaluationRecord:
    return EvaluationRecord(problem=problem, solution="s", status=status,
                            workloads=workloads).finalize()


# ---------------------------------------------------------------------------- annotate

def test_annotate_fills_the_sol_fields():
    profile = load_profile(H200)
    n = 8192 * 4096
    work = Work(vector_flops=4 * n, bytes=2 * (2 * n + 4096))  # RMSNorm prefill, bf16
    sol = work.bytes / 4800e9 * 1e3
    result = _wl(time_ms=2 * sol, eager_ms=4 * sol, compile_ms=3 * sol)
    out = annotate(result, work, profile, "bf16", baseline_time(result, "best"))
    assert out is result
    assert result.flops == work.flops and result.bytes == work.bytes
    assert result.sol_ms == pytest.approx(sol) and result.bound == "memory"
    assert result.sol_floor_ms is None  # datasheet profiles carry no launch floor
    # T_b = 3 T_SOL, T_k = 2 T_SOL: 1 / (1 + 1/2)
    assert result.sol_score == pytest.approx(2 / 3)


def test_annotate_scores_against_the_empty_kernel_floor():
    profile = load_profile(H200).model_copy(update={"empty_kernel_ms": 0.002})
    work = Work(vector_flops=4096, bytes=2 * (2 * 4096 + 4096))  # decode: nanoseconds
    result = _wl(time_ms=0.002, eager_ms=0.006, compile_ms=0.004)
    annotate(result, work, profile, "bf16", baseline_time(result, "best"))
    assert result.sol_ms < 1e-5 and result.sol_floor_ms == 0.002
    assert result.sol_score == 1.0  # at the floor: as fast as a launch can be


def test_annotate_unknown_device_leaves_sol_unknown_with_a_reason():
    result = _wl()
    annotate(result, Work(tensor_flops=10, bytes=10), None, "bf16", 1.0)
    assert result.flops == 10 and result.bytes == 10
    assert result.sol_ms is None and result.sol_score is None and result.bound is None
    assert "SOL unknown" in result.message and "solforge calibrate" in result.message


def test_annotate_zeroes_an_impossible_time():
    profile = load_profile(H200)
    work = Work(tensor_flops=2 * 8192**3, bytes=3 * 2 * 8192**2)
    result = _wl(time_ms=0.1, eager_ms=1.5, compile_ms=1.4)  # sol is ~1.1 ms
    annotate(result, work, profile, "bf16", baseline_time(result, "best"))
    assert result.sol_score == 0.0
    assert "faster than the speed of light" in result.message


def test_annotate_incorrect_result_scores_zero():
    result = _wl(correct=False)
    annotate(result, Work(bytes=1e9), load_profile(H200), "bf16", 2.0)
    assert result.sol_score == 0.0


def test_baseline_choices():
    w = _wl(eager_ms=2.0, compile_ms=1.5)
    assert baseline_time(w, "eager") == 2.0
    assert baseline_time(w, "compile") == 1.5
    assert baseline_time(w, "best") == 1.5
    assert baseline_time(w, {"w": 0.9}) == 0.9
    assert baseline_time(w, {"other": 0.9}) is None
    with pytest.raises(ValueError):
        baseline_time(w, "fastest")


# ---------------------------------------------------------------------------- summary

@pytest.fixture()
def records() -> list[EvaluationRecord]:
    return [
        # 2x eager, 1.5x compile: best baseline 1.5 ms
        _record("a", [_wl(time_ms=1.0, eager_ms=2.0, compile_ms=1.5, sol_ms=0.5)]),
        # 4x eager, 3x compile (best 3 ms, time 1 ms: 3x vs best)
        _record("b", [_wl(time_ms=1.0, eager_ms=4.0, compile_ms=3.0, sol_ms=0.5)]),
        # slower than both
        _record("c", [_wl(time_ms=2.0, eager_ms=1.0, compile_ms=1.0, sol_ms=0.5)]),
        _record("d", [_wl(correct=False, time_ms=None)], status=Status.INCORRECT_NUMERICAL),
        _record("e", [], status=Status.COMPILE_ERROR),
    ]


def test_summary_keys_and_counts(records):
    s = summarize(records, H200, agent="fake")
    expected = {"schema", "device", "agent", "baseline", "problems", "passed", "pass_rate",
                "geomean_speedup_vs_eager", "geomean_speedup_vs_compile",
                "geomean_speedup_vs_best", "fast_1_vs_eager", "fast_1_vs_compile",
                "fast_2_vs_best", "sol_score_median", "sol_score_mean",
                "geomean_speedup_vs_eager_correct", "geomean_speedup_vs_compile_correct",
                "geomean_speedup_vs_best_correct"}
    assert set(s) == expected
    assert s["schema"] == "solforge.summary/1" and s["device"] == H200
    assert s["agent"] == "fake" and s["baseline"] == "best"
    assert (s["problems"], s["passed"], s["pass_rate"]) == (5, 3, 0.6)


def test_summary_geomeans_count_failures_as_one(records):
    s = summarize(records, H200)
    # vs eager: 2, 4, 0.5 and two failures at 1.0
    assert s["geomean_speedup_vs_eager"] == pytest.approx((2 * 4 * 0.5) ** (1 / 5))
    assert s["geomean_speedup_vs_eager_correct"] == pytest.approx((2 * 4 * 0.5) ** (1 / 3))
    assert s["geomean_speedup_vs_compile"] == pytest.approx((1.5 * 3 * 0.5) ** (1 / 5))
    assert s["geomean_speedup_vs_best"] == pytest.approx((1.5 * 3 * 0.5) ** (1 / 5))
    assert speedup_vs_best(records[1]) == pytest.approx(3.0)


def test_summary_fast_p(records):
    s = summarize(records, H200)
    assert s["fast_1_vs_eager"] == pytest.approx(2 / 5)  # a and b
    assert s["fast_1_vs_compile"] == pytest.approx(2 / 5)
    assert s["fast_2_vs_best"] == pytest.approx(1 / 5)  # only b is over 2x the best


def test_summary_sol_scores_follow_the_baseline(records):
    def score(t_k, t_b, t_sol=0.5):
        return 1 / (1 + (t_k - t_sol) / (t_b - t_sol))

    best = summarize(records, H200)
    scores = sorted([score(1.0, 1.5), score(1.0, 3.0), score(2.0, 1.0), 0.0, 0.0])
    assert best["sol_score_mean"] == pytest.approx(sum(scores) / 5)
    assert best["sol_score_median"] == pytest.approx(scores[2])

    eager = summarize(records, H200, baseline="eager")
    assert eager["baseline"] == "eager"
    expected = [score(1.0, 2.0), score(1.0, 4.0), score(2.0, 1.0), 0.0, 0.0]
    assert eager["sol_score_mean"] == pytest.approx(sum(expected) / 5)

    stored = {"a": {"w": 1.0}, "b": {"w": 1.0}, "c": {"w": 2.0}}
    s = summarize(records, H200, baseline=stored)
    assert s["baseline"] == "stored"
    assert s["sol_score_mean"] == pytest.approx((0.5 + 0.5 + 0.5) / 5)


def test_summary_edge_cases():
    empty = summarize([], "cpu")
    assert empty["problems"] == 0 and empty["pass_rate"] is None
    assert empty["geomean_speedup_vs_best"] is None and empty["sol_score_median"] is None
    with pytest.raises(ValueError, match="one record per problem"):
        summarize([_record("a", []), _record("a", [])], "cpu")
    with pytest.raises(ValueError, match="baseline"):
        summarize([], "cpu", baseline="fastest")
    # all failed: every geomean is 1.0x, nothing correct
    failed = summarize([_record("x", [], status=Status.TIMEOUT)], "cpu")
    assert failed["geomean_speedup_vs_eager"] == 1.0
    assert failed["geomean_speedup_vs_best_correct"] is None
    assert failed["sol_score_mean"] == 0.0
    assert not math.isnan(failed["fast_2_vs_best"])


def test_summary_scores_only_the_timed_workloads():
    """On a GPU the small CPU workloads are checked for correctness and never timed: they
    have no SOL; a problem's score is that of its timed workloads (the first H200 run
    reported a median of 0 because such workloads made every passing problem unscorable)."""
    def score(t_k, t_b, t_sol=0.5):
        return 1 / (1 + (t_k - t_sol) / (t_b - t_sol))

    untimed = _wl(name="cpu_small", time_ms=None, eager_ms=None, compile_ms=None)
    recs = [_record("a", [untimed, _wl(time_ms=1.0, eager_ms=2.0, compile_ms=1.5, sol_ms=0.5)]),
            _record("b", [untimed, _wl(time_ms=1.0, eager_ms=4.0, compile_ms=3.0, sol_ms=0.5)]),
            _record("c", [untimed], status=Status.INCORRECT_NUMERICAL)]
    s = summarize(recs, H200)
    assert s["sol_score_median"] == pytest.approx(score(1.0, 1.5))
    assert s["sol_score_mean"] == pytest.approx((score(1.0, 1.5) + score(1.0, 3.0) + 0) / 3)
    # a passing problem with no timed workload at all has no score, rather than 0
    only = summarize([_record("d", [untimed])], H200)
    assert only["sol_score_median"] is None


def test_a_baselines_own_program_is_timed_as_that_baseline():
    """The reference kept as it is (``baseline_itself='eager'``) reads 1.0 where eager is
    the faster baseline, whatever its own second timing said, and compile's ratio to eager
    where compile is faster: a real shortfall still shows."""
    ref = _record("p", [_wl(time_ms=2.004, eager_ms=2.0, compile_ms=2.5)])
    assert speedup_vs_best(ref) == pytest.approx(2.0 / 2.004)
    ref.baseline_itself = "eager"
    assert speedup_vs_best(ref) == 1.0
    assert speedup_vs_best(ref.to_json()) == 1.0  # a ledger row reads the same
    slower = _record("q", [_wl(time_ms=1.99, eager_ms=2.0, compile_ms=1.5)])
    slower.baseline_itself = "eager"
    assert speedup_vs_best(slower) == pytest.approx(0.75)
    comp = _record("r", [_wl(time_ms=1.51, eager_ms=2.0, compile_ms=1.5),
                         _wl(name="v", time_ms=3.0, eager_ms=3.1, compile_ms=3.0)])
    comp.baseline_itself = "compile"
    assert speedup_vs_best(comp) == 1.0
    # a compile baseline outside the tolerance does not count: eager is the best
    out = _record("s", [_wl(time_ms=2.1, eager_ms=2.0, compile_ms=1.0,
                            compile_within_tolerance=False)])
    out.baseline_itself = "eager"
    assert speedup_vs_best(out) == 1.0
    assert summarize([ref, slower], "cpu")["geomean_speedup_vs_best"] == \
        pytest.approx(0.75 ** 0.5)
