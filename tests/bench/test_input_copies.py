"""Copies of a large input set: how many the judge holds at once (a real judge process,
its live tensors followed by ``live_tensors.py``), and what the memory plan says the judge
and the runner hold for KernelBench's 51_Argmax (8 GB of input, counted on the meta
device). Its judge held about six copies and ran the reference, as its own candidate, out
of memory on an 80 GB H100 (benchmarks/results/2026-12-05-h100-s18)."""

from __future__ import annotations

import json

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.bench.judge import admission
from solforge.bench.judge.admission import Sizes
from solforge.bench.judge.reference_solution import reference_solution
from solforge.problems.loader import import_file, load_problem
from solforge.records.evaluation import Status
from solforge.records.options import EvalOptions
from tests.bench.test_index_outputs import ARGMAX as ARGMAX_NEW

# KernelBench's file, its model as test_index_outputs writes it (there as a ModelNew)
ARGMAX = "{prelude}" + ARGMAX_NEW.replace("class ModelNew", "class Model") + '''
batch_size = {b}
dim1 = {d1}
dim2 = {d2}
def get_inputs():
    x = torch.rand(batch_size, dim1, dim2)
    return [x]
def get_init_inputs():
    return [1]
'''

# In the judge only: its live tensors followed, and the wall-clock batch's byte cap at the
# real problem's scale (2 GiB beside 8 GB of input: a quarter of the input set)
FOLLOWED = '''
import sys
_MAIN = getattr(sys.modules["__main__"], "__spec__", None)
if _MAIN is not None and _MAIN.name == "solforge.bench.judge.process":
    from tests.bench.live_tensors import install
    install({out!r})
    import solforge.bench.measure.timing as _timing
    _timing.BATCH_MAX_BYTES = {batch_cap}
'''

SMALL = (32, 512, 511)  # 33 MB of fp32: 51_Argmax at 1/256 of its size
MiB = float(1 << 20)


def test_the_judge_holds_at_most_three_copies_of_a_large_input_set(tmp_path, monkeypatch):
    """51_Argmax at 1/256 of its size, the reference as its own candidate, one timing
    input set (as on the H100). The judge's peak was 7 input sets (the copies below) and
    is 3: the pool, the last timed call's inputs and the next one's (the eager baseline's
    loop). Only tensors count: the CPU channel's pickles are host memory of no GPU run."""
    b, d1, d2 = SMALL
    x_mb = b * d1 * d2 * 4 / MiB
    peaks = tmp_path / "judge.json"
    prob = tmp_path / "argmax_small.py"
    prelude = FOLLOWED.format(out=str(peaks), batch_cap=b * d1 * d2)
    prob.write_text(ARGMAX.format(prelude=prelude, b=b, d1=d1, d2=d2))
    # one input set, as the H100 gave 51_Argmax, and room for it (no refusal)
    least = admission.footprint(Sizes(inputs_mb=x_mb, weights_mb=0.0, outputs_mb=0.0), 1)
    monkeypatch.setenv("SOLFORGE_DEVICE_MEMORY_MB", str(round(1.05 * least)))
    monkeypatch.setenv("SOLFORGE_SLOTS", str(tmp_path / "slots"))  # a ledger of its own
    (tmp_path / "slots").mkdir()
    opts = EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=300,
                       seed=3, trials=2)
    with Evaluator(opts) as ev:
        r = ev.evaluate(prob, reference_solution(load_problem(prob)))
    assert r.status is Status.PASSED, r.message
    (w,) = r.workloads
    assert w.memory is not None and w.memory.input_sets == 1
    got = json.loads(peaks.read_text())
    peak = got["all"]["all"] / MiB
    assert peak <= 3.1 * x_mb, f"the judge held {peak / x_mb:.2f} input sets: {got}"
    # the plan's judge side covers what the judge held
    sizes = Sizes(inputs_mb=x_mb, weights_mb=0.0, outputs_mb=b * d2 * 8 / MiB)
    assert peak <= max(j for j, _ in admission.phases(sizes, 1).values())


@pytest.fixture
def argmax_51(tmp_path):
    """KernelBench's level1/51_Argmax_over_a_dimension as it is (8 GB of fp32 input)."""
    path = tmp_path / "51_Argmax_over_a_dimension.py"
    path.write_text(ARGMAX.format(prelude="", b=128, d1=4096, d2=4095))
    return import_file(path)


H100 = 0.9 * 81_559  # MiB an 80 GB H100 offers admitted workloads (admission.capacity_mb)


def test_the_plan_of_51_argmax_covers_the_judge_and_the_runner_and_fits_an_h100(argmax_51):
    s = admission.estimate(argmax_51, {}, [1])
    x = 128 * 4096 * 4095 * 4 / MiB
    assert s.inputs_mb == pytest.approx(x) and s.weights_mb == 0 and s.scratch_mb == 0
    assert admission.input_sets(s, H100) == 1
    before = admission.footprint(s, 1)  # outputs unknown: taken as large as the inputs
    s.outputs_mb = 128 * 4095 * 8 / MiB  # what the first trial tells
    after = admission.footprint(s, 1)
    p = admission.phases(s, 1)
    judge, runner = p["timing"]
    # the candidate's timing: the judge's pool and the copy the runner reads; the runner's
    # own copy, the last call's inputs and the new call's, the outputs it keeps
    assert judge == pytest.approx(2 * x)
    assert runner >= 3 * x + min(admission.RETAIN_MB, admission.CALLS * s.outputs_mb)
    # every phase's two sides together, and two CUDA contexts
    for j, r in p.values():
        assert after >= j + r + 2 * admission.CONTEXT_MB
    assert after == pytest.approx(43_802, abs=1)
    assert after < before < H100 and admission.refusal(s, H100) is None
    # what s18's judge and runner held together (51,212 + 16,700 MiB, and 8 GiB more
    # asked for) did not fit the H100; the plan's largest phase now does
    assert 51_212 + 16_700 + 8_192 > H100


def test_a_workload_too_large_for_the_device_is_refused_before_it_runs(argmax_51):
    s = admission.estimate(argmax_51, {}, [1])
    a100_40 = 0.9 * 40_960
    why = admission.refusal(s, a100_40)
    assert why is not None and "does not fit this device" in why
    assert "the judge" in why and "the candidate's process" in why
    assert admission.refusal(s, None) is None  # a CPU without a capacity given: never
    assert admission.refusal(Sizes(), a100_40) is None  # inputs not counted: the trials size it
