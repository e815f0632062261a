"""The float64 arbitration (``bench/judge/arbitration.py``) on hand-made answers: who it
rescues, who it does not, and where it stays out of the way."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from solforge.bench.judge import arbitration
from solforge.bench.judge.arbitration import Float64Run, arbitrate, compare_or_arbitrate
from solforge.problems import load_problem
from solforge.records.evaluation import Status
from tests.conftest import PROBLEMS

SUM = load_problem(PROBLEMS / "cancelling_sum.py")


class Shifted(nn.Module):
    """The fixture's reference: an fp32 sum that rounds by about 0.4 a row."""

    def forward(self, x):
        return (x + 1000.0).sum(dim=1) - 1000.0 * x.shape[1]


def _case(seed: int = 0):
    x = torch.randn(64, 4096, generator=torch.Generator().manual_seed(seed))
    ref = Shifted()
    return ref, [x], ref(x)


def test_the_closer_answer_passes_and_says_why():
    ref, x, want = _case()
    exact = x[0].double().sum(dim=1).float()
    c = compare_or_arbitrate(exact, Float64Run(ref, x, 0, want), SUM)
    assert c.ok
    assert c.note.startswith(arbitration.ARBITRATED) and "at least as close" in c.note
    assert c.max_abs_error > 0.1  # the statistics stay those against the reference
    v = arbitrate(exact, Float64Run(ref, x, 0, want), SUM)
    assert v.ok and v.candidate_mismatches == 0 < v.reference_mismatches
    assert v.candidate_max_abs < 1e-4 < v.reference_max_abs and v.elements == 64


@pytest.mark.parametrize("shift", [1.0, -1.0])
def test_an_answer_further_than_the_reference_fails(shift):
    ref, x, want = _case()
    off = x[0].double().sum(dim=1).float() + shift
    c = compare_or_arbitrate(off, Float64Run(ref, x, 0, want), SUM)
    assert c.status is Status.INCORRECT_NUMERICAL
    assert "further from it than the reference" in c.message


def test_an_answer_wrong_on_one_row_fails_though_it_is_exact_elsewhere():
    ref, x, want = _case()
    out = x[0].double().sum(dim=1).float()
    out[5] += 2.0  # beyond the reference's own worst error: the max decides
    assert not compare_or_arbitrate(out, Float64Run(ref, x, 0, want), SUM).ok


def test_nan_where_float64_has_none_fails():
    ref, x, want = _case()
    out = x[0].double().sum(dim=1).float()
    out[3] = float("nan")
    c = compare_or_arbitrate(out, Float64Run(ref, x, 0, want), SUM)
    assert c.status is Status.INCORRECT_NUMERICAL


def test_within_the_tolerance_of_the_reference_needs_no_float64_run(monkeypatch):
    ref, x, want = _case()
    monkeypatch.setattr(arbitration, "float64_outputs",
                        lambda *a: pytest.fail("float64 run for a passing answer"))
    assert compare_or_arbitrate(want.clone(), Float64Run(ref, x, 0, want), SUM).ok


def test_shape_and_integer_outputs_are_not_arbitrated():
    ref, x, want = _case()
    c = compare_or_arbitrate(want[:10], Float64Run(ref, x, 0, want), SUM)
    assert c.status is Status.INCORRECT_SHAPE
    idx = torch.arange(64)
    assert arbitrate(idx + 1, Float64Run(ref, x, 0, idx), SUM) is None


@pytest.mark.parametrize("bound", ["GOLDEN_MAX_ELEMENTS", "ARBITRATION_MAX_ELEMENTS"])
def test_too_large_for_float64_is_not_arbitrated(monkeypatch, bound):
    ref, x, want = _case()
    # outputs (64) above the outputs' bound, or inputs (262,144) above the inputs' one
    monkeypatch.setattr(arbitration, bound, 10 if bound == "GOLDEN_MAX_ELEMENTS" else 1000)
    exact = x[0].double().sum(dim=1).float()
    assert arbitrate(exact, Float64Run(ref, x, 0, want), SUM) is None
    assert compare_or_arbitrate(exact, Float64Run(ref, x, 0, want), SUM).status \
        is Status.INCORRECT_NUMERICAL


def test_a_large_input_with_a_small_output_is_arbitrated_but_gets_no_statistics_alone(
        monkeypatch):
    """Inputs past the statistics' bound (a sum over a dim of KernelBench's 8 GB input,
    here scaled down): a candidate that differs is arbitrated, and its trial's statistics
    come from that run; an answer that needs no arbitration never copies the inputs."""
    ref, x, want = _case()
    monkeypatch.setattr(arbitration, "GOLDEN_MAX_ELEMENTS", 1000)  # 262,144 inputs, 64 outputs
    runs = []
    real = arbitration.float64_outputs
    monkeypatch.setattr(arbitration, "float64_outputs", lambda *a: runs.append(1) or real(*a))
    exact = x[0].double().sum(dim=1).float()
    run = Float64Run(ref, x, 0, want)
    c = compare_or_arbitrate(exact, run, SUM)
    assert c.ok and c.note.startswith(arbitration.ARBITRATED)
    e_ref, e_out = arbitration.golden_errors(run, [exact])
    assert e_out < 1e-4 < 0.1 < e_ref and len(runs) == 1
    quiet = Float64Run(ref, x, 0, want)
    assert compare_or_arbitrate(want.clone(), quiet, SUM).ok
    assert arbitration.golden_errors(quiet, [want]) == (None, None)
    assert len(runs) == 1  # neither the passing comparison nor its statistics ran float64


def test_a_reference_that_cannot_run_in_float64_is_not_arbitrated():
    class Float32Only(Shifted):
        def forward(self, x):
            if x.dtype is not torch.float32:
                raise TypeError("float32 only")
            return super().forward(x)

    _, x, want = _case()
    exact = x[0].double().sum(dim=1).float()
    assert arbitrate(exact, Float64Run(Float32Only(), x, 0, want), SUM) is None
    assert not compare_or_arbitrate(exact, Float64Run(Float32Only(), x, 0, want), SUM).ok


def test_a_trials_float64_run_serves_its_arbitration_and_its_statistics_once(monkeypatch):
    ref, x, want = _case()
    runs = []
    real = arbitration.float64_outputs
    monkeypatch.setattr(arbitration, "float64_outputs",
                        lambda *a: runs.append(1) or real(*a))
    exact = x[0].double().sum(dim=1).float()
    run = Float64Run(ref, x, 0, want)
    assert compare_or_arbitrate(exact, run, SUM).ok
    e_ref, e_out = arbitration.golden_errors(run, [exact])
    assert e_out < 1e-4 < 0.1 < e_ref
    assert len(runs) == 1
