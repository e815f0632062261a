"""GPU-only evaluator checks (run on the H200; skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

from solforge.bench.evaluator import Evaluator
from solforge.records.options import EvalOptions
from solforge.records.evaluation import Status
from solforge.bench.measure.timing import TimingConfig, measure
from tests.conftest import FIXTURES, PROBLEMS, SOLUTIONS, requires_gpu

pytestmark = [requires_gpu, pytest.mark.gpu]
TINY = PROBLEMS / "tiny_linear.py"
HACKS = FIXTURES / "hacks"


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalOptions(device="cuda", baselines=["eager"], timeout_s=300, seed=3)) as e:
        yield e


@pytest.mark.parametrize("solution, language", [
    ("tiny_good_pytorch.py", "pytorch"),
    ("tiny_good_triton.py", "triton"),
    ("tiny_good_nvrtc.py", "cuda_cpp"),
    ("tiny_good_load_inline.py", "cuda_cpp"),
])
def test_languages_pass_on_gpu(ev, solution, language):
    r = ev.evaluate(TINY, SOLUTIONS / solution)
    assert r.status is Status.PASSED, r.message
    assert r.language == language
    big = [w for w in r.workloads if w.name == "gpu_big"][0]
    assert big.time_ms and big.time_ms > 0.05 and big.kernels


def test_runner_cuda_start_up_is_logged_under_the_slot(ev):
    import time

    from solforge.bench.measure import slots

    t0 = time.time()
    r = ev.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py")
    assert r.status is Status.PASSED, r.message
    time.sleep(20)  # the spares started after this evaluation finish their CUDA start-up
    starts = set(slots.held_intervals("cuda", since=t0)) - set(
        slots.held_intervals("cuda", since=t0, exclude=(slots.RUNNER_START,)))
    assert starts, "no runner start-up held the device slot"
    # shared: a start-up times nothing, so it goes on beside other evaluators' trials
    assert starts <= set(slots.held_intervals("cuda", since=t0, shared=True)), starts


def test_profiler_kernel_time_counts_every_stream():
    x = torch.randn(1 << 26, device="cuda")
    side = torch.cuda.Stream()

    def two_streams(a):
        b = a * 2
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            c = a * 3
        torch.cuda.current_stream().wait_stream(side)
        return b + c

    def one_stream(a):
        return a * 2

    cfg = TimingConfig(budget_ms=300)
    one = measure(one_stream, [[x]], torch.device("cuda"), cfg).median_kernel_ms
    two = measure(two_streams, [[x]], torch.device("cuda"), cfg).median_kernel_ms
    # three elementwise passes against one: side-stream work is counted
    assert two > 2.2 * one


def test_same_solution_twice_agrees_within_2_percent(ev):
    a = ev.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py", workloads=["gpu_big"])
    b = ev.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py", workloads=["gpu_big"])
    ta, tb = a.workloads[0].time_ms, b.workloads[0].time_ms
    print(f"same solution twice, kernel-time medians: {ta:.4f} ms and {tb:.4f} ms "
          f"({abs(ta - tb) / min(ta, tb):.2%} apart)")  # recorded by the GPU session (-rP)
    assert ta > 0.05
    assert abs(ta - tb) / min(ta, tb) < 0.02, (ta, tb)


def test_illegal_memory_access_is_survived(ev, tmp_path):
    bad = tmp_path / "illegal.py"
    bad.write_text('''
import torch.nn as nn
from solforge.kernels import cuda
K = cuda.compile(r"""extern "C" __global__ void boom(float* p) { p[1ll << 40] = 1.0f; }""", "boom")
class ModelNew(nn.Module):
    def __init__(self, k=33, n=17):
        super().__init__()
    def forward(self, x):
        K(grid=(1,), block=(1,), args=(x,))
        return x.sum()
''')
    r = ev.evaluate(TINY, bad)
    assert r.status is Status.RUNTIME_ERROR
    assert ev.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py").status is Status.PASSED


def test_side_stream_work_is_timed(ev):
    honest = ev.evaluate(TINY, SOLUTIONS / "tiny_good_pytorch.py", workloads=["gpu_big"])
    side = ev.evaluate(TINY, HACKS / "side_stream.py", workloads=["gpu_big"])
    assert side.status is Status.PASSED, side.message
    # the side stream's GEMM is in the kernel time: no gain from hiding it
    assert side.workloads[0].time_ms > 0.8 * honest.workloads[0].time_ms


def test_reading_freed_memory_gains_nothing(ev):
    r = ev.evaluate(TINY, HACKS / "freed_memory.py")
    assert r.status is not Status.PASSED


def test_host_work_flagged_on_gpu(ev):
    # gpu_mid: on gpu_big the host arithmetic takes seconds per call (minutes per evaluation)
    r = ev.evaluate(TINY, HACKS / "host_work.py", workloads=["gpu_mid"])
    assert r.status is Status.REWARD_HACK and "off_device_work" in r.flags, r.message
