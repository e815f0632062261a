"""No honest baseline is faster than its speed of light: every built-in problem's recorded H200
baselines against the bound solforge computes for them now.

Covers: the eager and torch.compile times of every timed workload in session 10's final
records (``benchmarks/results/2026-12-02-h200-s10/optimize_run-call6.tgz``: 53 problems, 186
workloads, torch 2.11 under PyTorch's default settings, which ``MathFlags()`` stands for)
against the H200 datasheet row, which no baseline may beat, and against each of session 10's
five calibration tables less ``CALIBRATION_SHORTFALL`` (a calibrated rate is the best of a
few 8192^3 GEMMs; cuBLAS beat it by up to 6.3% on other shapes). No baseline may be judged
faster than light on any of them. The work is counted at each GPU workload's real size on
the meta device (shapes only: seconds for the whole corpus); a reference that reads its data
(``.item()``, ``nonzero``) cannot run there and is counted at its CPU workload's size, which
is enough because it must declare its FLOPs and bytes (every built-in does): the count then
only says which op families and dtypes ran.

Does not cover: problems outside the corpus (KernelBench's fp32 convolutions are
``test_units.py``'s and ``benchmarks/gpu/check_sol_units.py``'s), times measured after
session 10, candidates' times (only the baselines are known to be honest), and the op
families a GPU dispatches where meta does not (SDPA runs its math decomposition on meta, as
fp32 bmm even for bf16 inputs, and LSTM its matmuls): the unit would differ only for fp32
attention or an fp32 RNN, which no built-in problem has (a bf16 class bounds the bmm at
bf16 either way).
"""

from __future__ import annotations

import glob
import json
import tarfile
from functools import cache
from pathlib import Path

import pytest
import torch

from solforge.bench.measure import inputs as I
from solforge.problems import Problem, builtin_problems
from solforge.problems.loader import import_file
from solforge.sol import MathFlags, Work, compute_time, count_work, faster_than_sol, sol_time
from solforge.sol.calibrate import CALIBRATION_SHORTFALL
from solforge.sol.devices import match_device
from solforge.sol.profile import DeviceProfile, profile_from_spec, read_profile

S10 = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-02-h200-s10"
DEFAULTS = MathFlags()  # PyTorch's defaults, as the H200 runs had them


@cache
def _records() -> dict[str, dict[str, dict]]:
    """problem -> workload -> the final record's workload result."""
    out: dict[str, dict[str, dict]] = {}
    with tarfile.open(S10 / "optimize_run-call6.tgz") as tgz:
        for member in tgz.getmembers():
            if member.name.startswith("optexport/records/") and member.name.endswith(".json"):
                record = json.load(tgz.extractfile(member))
                out[record["problem"]] = {w["name"]: w for w in record["workloads"]}
    return out


def _tables() -> list[tuple[str, DeviceProfile]]:
    spec = match_device("NVIDIA H200")
    assert spec is not None
    tables = [("datasheet", profile_from_spec(spec))]
    tables += [(Path(p).name, read_profile(Path(p)))
               for p in sorted(glob.glob(str(S10 / "calibration-call*.json")))]
    assert len(tables) == 6
    return tables


def _count(problem: Problem, params: dict, device: str) -> Work:
    mod = import_file(problem.path)
    dev = torch.device(device)
    model = I.build_model(mod.Model, I.init_args(mod, params), dev, not problem.train_mode)
    return count_work(model, I.make_inputs(mod, params, 0, "normal", dev))


def _work(problem: Problem, workload) -> Work:
    declared = (problem.declared_flops(workload), problem.declared_bytes(workload))
    try:
        counted = _count(problem, workload.params, "meta")
    except (NotImplementedError, RuntimeError):  # reads its data: count a CPU workload
        assert None not in declared, f"{problem.name} must declare flops and bytes"
        cpu = next(w for w in problem.workloads if w.cpu)
        counted = _count(problem, cpu.params, "cpu")
    return counted.with_declared(*declared)


def _problems() -> list:
    return [pytest.param(p, id=p.name) for p in builtin_problems()]


@pytest.mark.parametrize("problem", _problems())
def test_no_baseline_beats_its_bound_on_the_h200(problem):
    recorded = _records().get(problem.name)
    if recorded is None:
        pytest.skip("no session-10 H200 record (a problem added since)")
    timed = [w for w in problem.workloads if not w.cpu]
    assert timed and all(w.name in recorded for w in timed)
    beaten, impossible = [], []
    for w in timed:
        r = recorded[w.name]
        baselines = {k: r[k] for k in ("eager_ms", "compile_ms") if r[k] is not None}
        assert "eager_ms" in baselines, f"{w.name}: no eager time recorded"
        work = _work(problem, w)
        for table, profile in _tables():
            sol_ms, _ = sol_time(work, profile, problem.unit, DEFAULTS)
            compute_ms = compute_time(work, profile, problem.unit, DEFAULTS)
            floor = sol_ms * (1 - CALIBRATION_SHORTFALL if table != "datasheet" else 1)
            for kind, t in baselines.items():
                if t < floor:
                    beaten.append(f"{w.name} {kind} {t:.4g} ms < {sol_ms:.4g} ms ({table})")
                if faster_than_sol(t, sol_ms, work.bytes, profile.llc_bytes, compute_ms):
                    impossible.append(f"{w.name} {kind} {t:.4g} ms, SOL {sol_ms:.4g} ({table})")
    assert not impossible, "honest baselines judged faster than light: " + "; ".join(impossible)
    assert not beaten, "honest baselines faster than the bound: " + "; ".join(beaten)
