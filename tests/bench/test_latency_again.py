"""The latency loop alone (``timing.measure_latency``, the runner's ``latency`` operation):
what the judge asks for when the clocks disagree, so a moment's load on the host is told
from work that is always off the device (``judge/performance._latency_again``)."""

from __future__ import annotations

import time

import torch

from solforge.bench.judge.reference_solution import reference_solution
from solforge.bench.measure import inputs as I
from solforge.bench.measure.timing import (
    TimingConfig,
    fresh_inputs,
    latency_seed,
    measure_latency,
)
from solforge.bench.runner.operations import Runner
from solforge.problems import load_problem
from tests.conftest import PROBLEMS


def test_every_call_is_timed_and_the_last_output_is_the_last_inputs():
    seen: list[int] = []

    def fn(a):
        seen.append(a.data_ptr())
        time.sleep(0.002)
        return a * 3

    pool = [[torch.randn(16)] for _ in range(3)]
    seeds = [11, 22, 33, 44]
    times, out = measure_latency(fn, pool, torch.device("cpu"), TimingConfig(), seeds, 6)
    assert len(times) == 6 and all(t >= 2.0 for t in times), times  # each call's sleep
    assert len(seen) == 7  # a warm-up call, then the six
    want = fresh_inputs(pool[5 % 3], latency_seed(seeds, 5))[0] * 3
    assert torch.equal(out, want)
    # the inputs are fresh values, not the pool's: the last call cannot be answered ahead
    assert not torch.equal(out, pool[2][0] * 3)


def test_the_runner_answers_latency_with_the_candidates_output(tmp_path):
    p = load_problem(PROBLEMS / "tiny_linear.py")
    solution = reference_solution(p)
    w = next(x for x in p.workloads if x.name == "small")
    r = Runner("cpu")
    assert r.op_load({"problem": str(p.path), "solution": str(solution),
                      "params": w.params, "eval_mode": False})["ok"]
    module = r.problem_mod
    pool = [I.make_inputs(module, w.params, s, "normal", torch.device("cpu"))
            for s in (0, 1)]
    seeds = [5, 6, 7]
    reply = r.op_latency({"pool": pool, "seeds": seeds, "config": {}, "calls": 4, "seed": 1})
    assert reply["ok"] and len(reply["latency_ms"]) == 4 and reply["flags"] == []
    last = fresh_inputs(pool[3 % 2], latency_seed(seeds, 3))
    with torch.no_grad():
        want = r.model(*last)
    assert torch.allclose(reply["outputs"][0], want)
