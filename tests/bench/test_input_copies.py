"""Copies of a large input set: how many the judge holds at once (a real judge process,
its live tensors followed by ``live_tensors.py``). On KernelBench's 51_Argmax (8 GB of
input) its judge held about six copies and ran the reference, as its own candidate, out
of memory on an 80 GB H100 (benchmarks/results/2026-12-05-h100-s18)."""

from __future__ import annotations

import json

from solforge.bench.evaluator import Evaluator
from solforge.bench.judge import admission
from solforge.bench.judge.admission import Sizes
from solforge.bench.judge.reference_solution import reference_solution
from solforge.problems.loader import load_problem
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
if "solforge.bench.judge.pipeline" in sys.modules:
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
