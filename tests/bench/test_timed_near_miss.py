"""A timed output just outside the tolerance is run again before it is called a cheat
(``judge/performance._timed_call_wrong``): wrong again on its own, it is the numerics
(``INCORRECT_NUMERICAL``); a far-off timed output stays ``REWARD_HACK`` (the hack corpus's
stale caches, ``tests/anticheat/test_corpus.py``)."""

from __future__ import annotations

from pathlib import Path

from solforge.bench.evaluator import Evaluator
from solforge.records.evaluation import Status
from solforge.records.options import EvalOptions

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "problems" / "tiny_linear.py"

# right through the correctness trials, then one element of each output three times its
# tolerance off (a kernel whose rounding fails on some inputs looks like this from outside)
NEAR_MISS = '''
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, k=33, n=17):
        super().__init__()
        self.fc = nn.Linear(k, n)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        y = F.gelu(self.fc(x)) * 1.5
        if self.calls > 8:
            y = y.clone()
            y[0, 0] += 3e-4 * (1 + y[0, 0].abs())
        return y
'''


def test_a_timed_output_just_outside_the_tolerance_is_the_numerics(tmp_path):
    sol = tmp_path / "near_miss.py"
    sol.write_text(NEAR_MISS)
    with Evaluator(EvalOptions(device="cpu", baselines=["eager"], budget_ms=60, timeout_s=60,
                               seed=1, workloads=["small"])) as ev:
        r = ev.evaluate(str(TINY), str(sol))
    assert r.status is Status.INCORRECT_NUMERICAL, (r.status, r.flags, r.message[:600])
    assert "timed_output_mismatch" not in r.flags, r.flags
    assert "run again on their own fail too" in r.message, r.message[:600]
