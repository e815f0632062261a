"""The float64 arbitration of a reduction with a large input and a small output
(KernelBench's 47_Sum: 2.1 billion inputs, 524,160 outputs): what the memory plan counts
for it, and a real evaluation, scaled down, in which the judge arbitrates past the record
statistics' bound (``bench/judge/arbitration.py``)."""

from __future__ import annotations

import json

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.bench.judge import admission
from solforge.bench.judge.admission import Sizes
from solforge.problems.loader import import_file, load_problem
from solforge.records.evaluation import Status
from solforge.records.options import EvalOptions
from tests.bench.test_input_copies import ARGMAX, H100, MiB

# KernelBench's level1/47_Sum_reduction_over_a_dimension, its sizes as at 423217d9
SUM_47 = '''
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)
def get_inputs():
    return [torch.rand(128, 4096, 4095)]
def get_init_inputs():
    return [1]
'''


def test_the_plan_of_47_sum_counts_its_float64_copies_and_still_fits_an_h100(tmp_path):
    path = tmp_path / "47_Sum_reduction_over_a_dimension.py"
    path.write_text(SUM_47)
    s = admission.estimate(import_file(path), {}, [1])
    x = 128 * 4096 * 4095 * 4 / MiB
    assert s.inputs_f64_mb == pytest.approx(2 * x) and s.weights_f64_mb == 0
    assert "float64" not in admission.phases(s, 1)  # outputs unknown: as large as the inputs
    s.outputs_mb, s.outputs_f64_mb = 128 * 4095 * 4 / MiB, 128 * 4095 * 8 / MiB
    p = admission.phases(s, 1)
    assert admission.golden_mb(s) == pytest.approx(2 * x + 4 * s.outputs_f64_mb)
    judge, runner = p["float64"]
    # the judge's pool, one rebuilt input set and the float64 copy of it
    assert judge >= 4 * x
    assert admission.footprint(s, 1) >= judge + runner + 2 * admission.CONTEXT_MB
    assert admission.footprint(s, 1) < H100 and admission.input_sets(s, H100) == 1


def test_an_index_output_plans_no_float64_run(tmp_path):
    """51_Argmax's outputs are indices: nothing to arbitrate, nothing counted for it."""
    path = tmp_path / "51_Argmax_over_a_dimension.py"
    path.write_text(ARGMAX.format(prelude="", b=128, d1=4096, d2=4095))
    s = admission.estimate(import_file(path), {}, [1])
    s.outputs_mb, s.outputs_f64_mb = 128 * 4095 * 8 / MiB, 0.0
    assert admission.golden_mb(s) == 0 and "float64" not in admission.phases(s, 1)


# A cancelling sum over the middle dim (as cancelling_sum.py over the last): the reference's
# fp32 rounding is far beyond the tolerance. In the judge only: the statistics' bound below
# the input's 2 million elements (its 512 outputs stay under it), as 47_Sum's 2.1 billion
# are above the real one, and its live tensors followed.
CANCELLING = '''
import sys
_MAIN = getattr(sys.modules["__main__"], "__spec__", None)
if _MAIN is not None and _MAIN.name == "solforge.bench.judge.process":
    import solforge.bench.judge.arbitration as _arbitration
    _arbitration.GOLDEN_MAX_ELEMENTS = 1 << 16
    from tests.bench.live_tensors import install
    install({out!r})
import torch, torch.nn as nn
SOLFORGE = {{"name": "cancelling_sum_dim", "category": "L1", "models": ["test fixture"],
            "precision": "fp32", "workloads": [{{"name": "small", "params": {{}}, "cpu": True}}]}}
class Model(nn.Module):
    def forward(self, x):
        return (x + 1000.0).sum(dim=1) - 1000.0 * x.shape[1]
def get_inputs():
    return [torch.randn(8, 4096, 64)]
def get_init_inputs():
    return []
'''

EXACT = '''
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        return x.double().sum(dim=1).float()
'''


def test_a_sum_past_the_statistics_bound_is_arbitrated_in_a_real_evaluation(tmp_path):
    peaks = tmp_path / "judge.json"
    prob = tmp_path / "cancelling_sum_dim.py"
    prob.write_text(CANCELLING.format(out=str(peaks)))
    sol = tmp_path / "exact.py"
    sol.write_text(EXACT)
    problem = load_problem(prob)
    opts = EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=300,
                       seed=3, trials=2)
    with Evaluator(opts) as ev:
        exact = ev.evaluate(problem, sol)
    # the exact sum differs from the reference on most rows, and is the closer to float64
    assert exact.status is Status.PASSED, exact.message
    (w,) = exact.workloads
    assert "float64 arbitration: trial 1 differs from the reference" in w.message, w.message
    assert w.max_abs_error > 0.1 and w.mismatch_ratio > 0.5
    assert w.golden_max_abs_error < 1e-4 < 0.1 < w.reference_golden_max_abs_error
    # the plan's judge side covers what the judge held, the float64 copies included
    x_mb = 8 * 4096 * 64 * 4 / MiB
    sizes = Sizes(inputs_mb=x_mb, weights_mb=0.0, outputs_mb=8 * 64 * 4 / MiB,
                  inputs_f64_mb=2 * x_mb, weights_f64_mb=0.0, outputs_f64_mb=8 * 64 * 8 / MiB)
    peak = json.loads(peaks.read_text())["all"]["all"] / MiB
    assert peak <= max(j for j, _ in admission.phases(sizes, w.memory.input_sets).values())
