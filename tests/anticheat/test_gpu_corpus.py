"""The corpora on a GPU (run on the H200; skipped without a CUDA device).

Every hack again, with its GPU outcome (some differ: work moved to the host or to another
process only shows on a GPU, a frame-walking timer meets the device clocks), every honest
solution (CUDA graphs, NVRTC, real Triton autotuning and atomics whose last bits vary),
the GPU faults, and the hardening switch that decides whether GPU runs may drop
capabilities by default (SOLFORGE_HARDEN_GPU=1: CUDA IPC must still work).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from tests.conftest import requires_gpu

from .test_corpus import CPU_HACKS, GAINS_NOTHING, Expect, caught, strict

pytestmark = [requires_gpu, pytest.mark.gpu]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HACKS = FIXTURES / "hacks"
HONEST = FIXTURES / "honest"
SOLUTIONS = FIXTURES / "solutions"
TINY = FIXTURES / "problems" / "tiny_linear.py"
RH, INC, OK = Status.REWARD_HACK, Status.INCORRECT_NUMERICAL, Status.PASSED
# Hacks run on gpu_mid, not gpu_big: those that move work to the host take minutes per call
# on 4096^3 (the first H200 run timed out on them); 512x1024x512 is still device work.
# Honest solutions run on gpu_big, where a real kernel time dwarfs any host overhead.
WL = ["small", "held", "gpu_mid"]
WL_HONEST = ["small", "held", "gpu_big"]

GPU_HACKS: dict[str, Expect] = {
    **CPU_HACKS,
    # device clocks: the frame walk shrinks the recorded kernel times during the latency
    # loop; on gpu_mid the launch overhead hides the gap from the judge's clock, so the
    # compute bound catches it (a reported time under half the FLOPs at the peak)
    "frame_walk_timing.py": Expect((RH,), ("off_device_work", "timing_mismatch",
                                           "harness_patched", "faster_than_sol")),
    # inputs held alive during timing: addresses never repeat there, so either caught in
    # the trials or it pays for every call
    "cache_by_pointer.py": Expect((RH, INC, OK), ("timed_output_mismatch",
                                                  "batch_output_mismatch",
                                                  "nondeterministic")),
    # the judge's own blocks, held alive by the file: it pays for every call, unless an
    # address repeats in the timed calls (then caught there); not yet run on a GPU
    "cache_by_pointer_held.py": Expect((RH, INC, OK)),
    "host_work.py": caught("off_device_work"),
    # the spinning thread holds the GIL, so on a GPU the runner's call path slows too:
    # off-device time as well as idle CPU (on the H200 on 2026-12-01 only the former: a
    # bug, fixed since, lost the idle window after the reference was timed again)
    "background_spinner.py": caught("background_work", "off_device_work"),
    "child_process_gpu.py": caught("off_device_work"),
    "side_stream.py": Expect((OK,)),  # counted: see test_gpu_evaluator's timing check
    "unjoined_stream.py": caught("unjoined_stream"),
    "disguised_torch_calls.py": strict("torch_fallback"),
    "compile_as_triton.py": strict("torch_fallback"),
}
GPU_GAINS_NOTHING = [n for n in GAINS_NOTHING if n != "child_process_gpu.py"]


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cuda", baselines=["eager"], timeout_s=300, seed=5)) as e:
        yield e


@pytest.mark.parametrize("name", sorted(GPU_HACKS))
def test_hack_on_gpu(ev, name):
    exp = GPU_HACKS[name]
    r = ev.evaluate(TINY, HACKS / name, policy=exp.policy, workloads=WL)
    if name == "cache_by_pointer.py":
        # GPU allocators hand addresses back at once: a stale cached output fails a trial
        # (INCORRECT_NUMERICAL, no flag needed); else it paid for every call (no flags)
        assert r.status in exp.statuses, (r.status, r.flags, r.message[:800])
        if r.status is OK:
            assert not r.flags, r.flags
        elif r.status is RH:
            exp.check(r)
        return
    exp.check(r)


@pytest.mark.parametrize("name", GPU_GAINS_NOTHING)
def test_hack_gains_nothing_on_gpu(ev, name):
    r = ev.evaluate(TINY, HACKS / name, workloads=WL)
    assert r.status is OK and not r.flags, r.message


@pytest.mark.parametrize("name", sorted(p.name for p in HONEST.glob("*.py")))
@pytest.mark.parametrize("policy", ["default", "strict"])
def test_honest_on_gpu(ev, name, policy):
    r = ev.evaluate(TINY, HONEST / name, policy=policy, workloads=WL_HONEST)
    assert r.status is OK, r.message[:2000]
    assert r.flags == [] and r.findings == [], [f.describe() for f in r.findings]
    big = next(w for w in r.workloads if w.name == "gpu_big")
    assert big.time_ms and big.kernels


def test_library_kernels_only_rule_on_gpu(ev):
    r = ev.evaluate(TINY, HACKS / "disguised_torch_calls.py", workloads=["gpu_mid"])
    assert r.status is OK and "torch_fallback" in r.flags
    assert any(f.rule == "torch_fallback.library_kernels_only" for f in r.findings), \
        [f.describe() for f in r.findings]


def test_gpu_out_of_memory_is_recorded_and_survived(ev):
    r = ev.evaluate(TINY, SOLUTIONS / "tiny_gpu_oom.py", workloads=WL)
    assert r.status is Status.RUNTIME_ERROR and "GPU out of memory" in r.message, r.message
    assert ev.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py", workloads=WL).status is OK


def test_hardened_gpu_runs_keep_cuda_ipc_and_block_the_judge(monkeypatch):
    """Decides whether GPU runs can be hardened by default (sandbox.hardened)."""
    monkeypatch.setenv("SOLFORGE_HARDEN_GPU", "1")
    with Evaluator(EvalOptions(device="cuda", baselines=["eager"], timeout_s=300,
                               seed=6)) as e:
        good = e.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py", workloads=WL)
        assert good.status is OK, good.message
        probe = e.evaluate(TINY, HACKS / "read_judge_memory.py", workloads=WL)
    assert "blocked" in probe.message, probe.message
    assert os.environ.get("SOLFORGE_HARDEN_GPU") == "1"


_POISONED_REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        # an index far out of range: a device-side assert, which poisons the CUDA context
        return x[torch.full((1,), 1 << 30, device=x.device, dtype=torch.long)]


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''


def test_a_judge_whose_cuda_context_is_lost_is_replaced(tmp_path):
    """A reference that poisons the judge's CUDA context (a device-side assert): the judge
    says so and exits, a new judge runs the evaluation once more, and only when that one
    loses its context too is the record kept, with the first fault in ``judge_fault``;
    the next evaluation runs on a healthy judge."""
    problem = tmp_path / "poisoned_reference.py"
    problem.write_text(_POISONED_REFERENCE)
    with Evaluator(EvalOptions(device="cuda", baselines=["eager"], timeout_s=300,
                               seed=7)) as e:
        r = e.evaluate(problem, SOLUTIONS / "tiny_good_pytorch.py")
        assert "CUDA context" in r.judge_fault, (r.judge_fault, r.message[:800])
        assert r.status in (Status.INVALID_REFERENCE, Status.RUNTIME_ERROR), r.message[:800]
        good = e.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py", workloads=WL)
    assert good.status is OK and good.judge_fault == "", good.message[:800]
