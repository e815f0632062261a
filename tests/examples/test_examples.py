"""The shipped example solutions pass the real evaluator (CPU: Triton under the
interpreter; CUDA C++ and CuTe DSL examples build here and run on a GPU only)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.bench.options import EvalOptions
from solforge.bench.records import Status
from solforge.problems import find_builtin

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "solutions"
TRITON = sorted(EXAMPLES.glob("*.py"))


@pytest.fixture(scope="module")
def ev():
    # correctness on every CPU workload, five trials each; timing is not what is tested here
    with Evaluator(EvalOptions(device="cpu", timing=False, timeout_s=600)) as e:
        yield e


def test_at_least_ten_triton_examples():
    assert len(TRITON) >= 10


@pytest.mark.parametrize("path", TRITON, ids=[p.stem for p in TRITON])
def test_triton_example_passes(ev, path):
    problem = find_builtin(path.stem)
    assert problem is not None, f"{path.name} names no built-in problem"
    r = ev.evaluate(problem, path)
    assert r.status is Status.PASSED, r.message
    assert r.language == "triton"
    assert all(w.trials == 5 for w in r.workloads)


def test_cuda_cpp_example_builds_without_gpu(ev):
    path = EXAMPLES / "cuda_cpp" / "rmsnorm_llama3.py"
    r = ev.evaluate(find_builtin("rmsnorm_llama3"), path)
    assert r.language == "cuda_cpp"
    # the NVRTC build (inline PTX included) ran and succeeded; running needs a GPU
    assert r.status is Status.RUNTIME_ERROR and "It compiled" in r.message, r.message


@pytest.mark.skipif(importlib.util.find_spec("cutlass") is None,
                    reason="nvidia-cutlass-dsl is not installed (extra: solforge[cute])")
def test_cute_dsl_example_imports_without_gpu(ev):
    path = EXAMPLES / "cute_dsl" / "residual_gate_flux.py"
    r = ev.evaluate(find_builtin("residual_gate_flux"), path)
    assert r.language == "cute_dsl"
    assert r.status is Status.RUNTIME_ERROR and "It compiled" in r.message, r.message
