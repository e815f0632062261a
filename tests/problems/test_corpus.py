"""Every built-in problem loads, has the workloads the format asks for, and its reference
is deterministic and non-trivial on its CPU workloads."""

from __future__ import annotations

import time

import pytest
import torch

from solforge.problems import builtin_problems, gen
from solforge.problems.spec import call_with_params

PROBLEMS = builtin_problems()
IDS = [p.name for p in PROBLEMS]


def _outputs(problem, workload, seed, dist="normal"):
    import importlib

    from solforge.problems.loader import import_file

    mod = import_file(problem.path)
    torch.manual_seed(42)
    model = mod.Model(*call_with_params(mod.get_init_inputs, dict(workload.params)))
    if not problem.train_mode:
        model.eval()
    torch.manual_seed(seed)
    with gen.distribution(dist):
        inputs = call_with_params(mod.get_inputs, dict(workload.params))
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model(*inputs)
    del importlib
    return out if isinstance(out, (tuple, list)) else [out]


def test_corpus_size_and_categories():
    cats = {}
    for p in PROBLEMS:
        cats[p.category] = cats.get(p.category, 0) + 1
    forward = [p for p in PROBLEMS if p.direction == "forward"]
    assert len(forward) >= 125, cats
    assert cats.get("L1", 0) >= 30 and cats.get("L2", 0) >= 50, cats
    assert cats.get("quant", 0) >= 10 and cats.get("attention", 0) >= 15, cats
    assert len(set(IDS)) == len(IDS), "problem names must be unique"


def test_corpus_families():
    """Every problem names its model family and where its shapes come from; the forward
    problems alone span at least 60 families."""
    unnamed = [p.name for p in PROBLEMS if not p.family or not p.shapes_from]
    assert not unnamed, f"SOLFORGE needs 'family' and 'shapes_from': {unnamed}"
    families = {p.family for p in PROBLEMS if p.direction == "forward"}
    assert len(families) >= 60, sorted(families)


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_problem_metadata(problem):
    assert problem.models, "each problem names the model(s) it comes from"
    assert problem.family and problem.shapes_from, "SOLFORGE needs 'family' and 'shapes_from'"
    assert problem.path.stem == problem.name
    ws = problem.workloads
    assert any(w.cpu and w.visible for w in ws), "needs a visible CPU workload"
    assert any(not w.visible for w in ws), "needs a held-out workload"
    assert sum(1 for w in ws if not w.cpu) >= 2, "needs real-model (GPU) workloads"
    for w in ws:
        f, b = problem.declared_flops(w), problem.declared_bytes(w)
        assert f is None or f >= 0
        assert b is None or b > 0


@pytest.mark.parametrize("problem", PROBLEMS, ids=IDS)
def test_reference_cpu_workloads(problem):
    for w in problem.workloads:
        if not w.cpu:
            continue
        t0 = time.perf_counter()
        a = _outputs(problem, w, seed=1)
        b = _outputs(problem, w, seed=1)
        c = _outputs(problem, w, seed=2, dist=problem.distributions[-1])
        assert time.perf_counter() - t0 < 20, "CPU workloads must run in seconds"
        for x, y, z in zip(a, b, c):
            if not isinstance(x, torch.Tensor):
                continue
            assert torch.equal(x, y), "reference must be deterministic for one seed"
            xf = x.float()
            assert torch.isfinite(xf).all(), "reference output has non-finite values"
            if x.numel() > 1 and x.dtype != torch.bool:
                assert xf.std() > 0 or not torch.equal(x, z), "output is trivially constant"
            assert x.shape == z.shape
