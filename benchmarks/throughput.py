"""Evaluator throughput on one device: how fast candidates get a verdict.

Measures, with the real evaluator (judge + sandboxed runners):

- warm Triton candidate, end to end: the second and later evaluations of a Triton
  solution (its kernels in Triton's cache, a spare runner up), seconds per evaluation;
- device busy fraction over a batch of evaluations: the seconds during which some process
  held the device's timing slot (from the slot's log) divided by the batch's wall time,
  with ``--workers`` evaluators at once on the same device;
- CUDA C++ candidates per device-hour: distinct NVRTC sources (each a cold build) evaluated
  back to back, extrapolated to an hour.

Run it on the GPU machine and record the JSON under benchmarks/results/::

    python benchmarks/throughput.py --device cuda --workers 3 --json out.json
    python benchmarks/throughput.py --device cpu --count 3          # the same path on a CPU

Not covered: load_inline builds (about 28 s cold each on the H200; NVRTC is the path this
project offers for many CUDA candidates).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from solforge.bench.measure import slots
from solforge.bench.evaluator import Evaluator
from solforge.bench.judge.state import spare_count
from solforge.records.options import EvalOptions
from solforge.problems import find_builtin

ROOT = Path(__file__).resolve().parents[1]
TRITON_EXAMPLE = ROOT / "examples" / "solutions" / "silu_llama3.py"
CUDA_TEMPLATE = '''
import torch
import torch.nn as nn
from solforge.kernels import cuda

SRC = r"""
extern "C" __global__ void silu_bf16(const unsigned short* x, unsigned short* y, long n) {{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;  // variant {variant}
    if (i < n) {{
        float v = __uint_as_float(((unsigned int)x[i]) << 16);
        float r = v / (1.0f + __expf(-v));
        unsigned short o;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(o) : "f"(r));
        y[i] = o;
    }}
}}"""
K = cuda.compile(SRC, "silu_bf16")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        K(grid=(cuda.cdiv(n, 256),), block=(256,), args=(x, y, n))
        return y
'''


def warm_triton(opts: EvalOptions, count: int) -> dict:
    problem = find_builtin("silu_llama3")
    times, statuses, phases, runner = [], [], [], []
    with Evaluator(opts) as ev:
        for _ in range(count + 1):
            t0 = time.monotonic()
            r = ev.evaluate(problem, TRITON_EXAMPLE)
            times.append(time.monotonic() - t0)
            statuses.append(r.status.value)
            phases.append(r.phase_seconds)
            runner.append(r.runner_seconds)
    return {"first_s": times[0], "warm_s_median": statistics.median(times[1:]),
            "warm_s": times[1:], "statuses": statuses, "phase_seconds": phases,
            "runner_seconds": runner}


def busy_fraction(opts: EvalOptions, workers: int, per_worker: int) -> dict:
    problem = find_builtin("silu_llama3")
    evaluators = [Evaluator(opts) for _ in range(workers)]
    for ev in evaluators:  # start-up (judges, CUDA contexts) is not part of the batch
        ev.evaluate(problem, TRITON_EXAMPLE)
    t0 = time.time()

    def work(ev: Evaluator) -> None:
        for _ in range(per_worker):
            ev.evaluate(problem, TRITON_EXAMPLE)

    threads = [threading.Thread(target=work, args=(ev,)) for ev in evaluators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.time()
    for ev in evaluators:
        ev.close()
    # busy: the slot held for evaluation work; runners' CUDA start-up (also under the
    # slot, so it never overlaps a timing) is reported beside it, not counted as busy
    held = slots.covered_seconds(
        slots.held_intervals(opts.device, since=t0, exclude=(slots.RUNNER_START,)), t0, t1)
    held_all = slots.covered_seconds(slots.held_intervals(opts.device, since=t0), t0, t1)
    return {"workers": workers, "evaluations": workers * per_worker, "wall_s": t1 - t0,
            "slot_held_s": held, "busy_fraction": held / (t1 - t0),
            "slot_held_with_runner_start_s": held_all,
            "spares_per_judge": spare_count(opts.device)}


def cuda_per_hour(opts: EvalOptions, count: int) -> dict:
    problem = find_builtin("silu_llama3")
    tmp = Path(tempfile.mkdtemp(prefix="solforge-cuda-"))
    statuses = []
    t0 = time.monotonic()
    with Evaluator(opts) as ev:
        for i in range(count):
            path = tmp / f"silu_{i}.py"
            path.write_text(CUDA_TEMPLATE.format(variant=f"{time.time_ns()}-{i}"))
            statuses.append(ev.evaluate(problem, path).status.value)
    wall = time.monotonic() - t0
    return {"candidates": count, "wall_s": wall, "per_hour": 3600.0 * count / wall,
            "statuses": statuses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--parts", default="warm,busy,cuda",
                    help="which measurements, comma-separated: warm, busy, cuda")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    opts = EvalOptions(device=a.device, baselines=["eager"], budget_ms=300,
                       workloads="visible")
    out: dict = {"device": a.device, "count": a.count}

    def save() -> None:  # after every part: a run stopped early keeps what it measured
        if a.json:
            a.json.write_text(json.dumps(out, indent=1))

    if "warm" in parts:
        out["warm_triton"] = warm_triton(opts, a.count)
        save()
    if "busy" in parts:
        out["busy"] = busy_fraction(opts, a.workers, a.count)
        save()
    if "cuda" in parts and a.device != "cpu":
        out["cuda_cpp"] = cuda_per_hour(opts, a.count * 4)
        save()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
