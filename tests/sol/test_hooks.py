"""The evaluator's hook on a real built-in problem, its reference and a stored CPU profile."""

from __future__ import annotations

import pytest
import torch

from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status, WorkloadResult
from solforge.problems import find_builtin
from solforge.problems.loader import import_file
from solforge.problems.spec import call_with_params
from solforge.sol import DeviceProfile, save_profile
from solforge.sol import profile as profile_module
from solforge.sol.hooks import FASTER_THAN_SOL, annotate_workload

CPU = DeviceProfile(name="cpu", source="calibrated", peaks_tflops={"fp32": 0.1, "bf16": 0.4},
                    bandwidth_gbs=20.0, empty_kernel_ms=0.002, llc_bytes=0)


@pytest.fixture()
def rmsnorm(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLFORGE_CACHE", str(tmp_path))
    monkeypatch.setattr(profile_module, "_warned", set())
    problem = find_builtin("rmsnorm_llama3")
    workload = next(w for w in problem.workloads if w.cpu)
    mod = import_file(problem.path)
    ref = mod.Model(*call_with_params(mod.get_init_inputs, dict(workload.params))).eval()
    inputs = call_with_params(mod.get_inputs, dict(workload.params))
    return problem, workload, ref, inputs


def _result(time_ms: float) -> WorkloadResult:
    return WorkloadResult(name="cpu_small", correct=True, status=Status.PASSED,
                          time_ms=time_ms, eager_ms=0.05, compile_ms=0.04)


def test_hook_fills_sol_fields_from_declared_counts(rmsnorm):
    problem, workload, ref, inputs = rmsnorm
    save_profile(CPU)
    res = _result(time_ms=0.03)
    annotate_workload(problem, ref, workload, inputs, EvalOptions(device="cpu"), res)
    assert res.flops == problem.declared_flops(workload)
    assert res.bytes == problem.declared_bytes(workload)
    assert res.bound == "memory"
    assert res.sol_ms == pytest.approx(res.bytes / (20.0 * 1e6))
    assert res.sol_floor_ms == 0.002
    t_sol = max(res.sol_ms, 0.002)
    assert res.sol_score == pytest.approx(1 / (1 + (0.03 - t_sol) / (0.04 - t_sol)))
    assert res.status is Status.PASSED and not res.flags


def test_hook_marks_faster_than_light_as_reward_hack(rmsnorm):
    problem, workload, ref, inputs = rmsnorm
    save_profile(CPU)  # llc_bytes=0: the data cannot hide in a cache
    res = _result(time_ms=1e-6)
    annotate_workload(problem, ref, workload, inputs, EvalOptions(device="cpu"), res)
    assert res.status is Status.REWARD_HACK and not res.correct
    assert FASTER_THAN_SOL in res.flags and res.sol_score == 0.0
    assert "faster than the speed of light" in res.message


def test_hook_without_a_profile_leaves_sol_unknown(rmsnorm):
    problem, workload, ref, inputs = rmsnorm
    res = _result(time_ms=0.03)
    with pytest.warns(RuntimeWarning, match="solforge calibrate"):
        annotate_workload(problem, ref, workload, inputs, EvalOptions(device="cpu"), res)
    assert res.flops is not None and res.sol_ms is None and res.sol_score is None
    assert res.status is Status.PASSED and "SOL unknown" in res.message


def test_hook_survives_a_reference_it_cannot_count(rmsnorm):
    problem, workload, _, inputs = rmsnorm

    class Broken(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    res = _result(time_ms=0.03)
    annotate_workload(problem, Broken(), workload, inputs, EvalOptions(device="cpu"), res)
    assert res.status is Status.PASSED and res.sol_ms is None
    assert "counting the reference failed" in res.message
