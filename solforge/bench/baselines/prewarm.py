"""Compile the ``torch.compile`` baselines of many problems in parallel, ahead of timing.

Inductor spends seconds per graph on the CPU; a corpus has hundreds of (problem, workload)
graphs, and the judge times one workload at a time. This module runs ``workers``
trusted processes that each build references and call ``torch.compile`` on them once,
filling inductor's on-disk caches (FX graph cache, Triton kernels), so the judge's own
compile later takes about a second per graph. Nothing is timed here and no candidate code
runs: only references, exactly as the judge builds them.

Not covered: modes whose compile depends on timing (``max-autotune`` benchmarks kernels on
the GPU; prewarming those in parallel would time them under contention, so they are
compiled by the judge alone).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import solforge
from solforge import env
from solforge.problems.spec import Problem

_WORKER = r"""
import sys, json, torch
from solforge.bench.measure import inputs as I
from solforge.problems.loader import import_file, load_problem
from torch import _dynamo
device = torch.device(sys.argv[1]); mode = sys.argv[2]
for line in sys.stdin:
    path, wname = json.loads(line)
    try:
        p = load_problem(path); w = p.workload(wname)
        mod = import_file(p.path, prefix="solforge_reference")
        eval_mode = not p.train_mode and not p.kernelbench_plain
        ref = I.build_model(mod.Model, I.init_args(mod, w.params), device, eval_mode)
        x = I.make_inputs(mod, w.params, 1, "normal", device)
        _dynamo.reset()
        fn = torch.compile(ref, mode=None if mode == "default" else mode)
        with torch.no_grad():
            fn(*x)
        I.synchronize(device)
        print(json.dumps([p.name, wname, "ok"]), flush=True)
    except Exception as e:
        print(json.dumps([path, wname, f"{type(e).__name__}: {e}"[:300]]), flush=True)
"""


def compile_env() -> dict[str, str]:
    """The environment variables that make every solforge process share inductor's cache."""
    return {"TORCHINDUCTOR_CACHE_DIR": str(env.cache_dir() / "inductor"),
            "TRITON_CACHE_DIR": str(env.cache_dir() / "triton")}


def prewarm(problems: Iterable[Problem], device: str, workers: int, mode: str = "default",
            timed_only: bool = True) -> dict[str, int]:
    """Compile every (problem, workload) baseline once, ``workers`` processes at a time."""
    if mode not in ("default", "reduce-overhead"):
        return {"compiled": 0, "failed": 0, "skipped": 0}
    jobs = []
    for p in problems:
        for w in p.workloads:
            if device == "cpu" and not w.cpu:
                continue
            if device != "cpu" and timed_only and w.cpu:
                continue
            jobs.append((str(p.path), w.name))
    if not jobs:
        return {"compiled": 0, "failed": 0, "skipped": 0}
    workers = max(1, min(workers, len(jobs)))
    env = dict(os.environ) | compile_env()
    src_root = str(Path(solforge.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(x for x in (src_root, env.get("PYTHONPATH")) if x)
    shards = [jobs[i::workers] for i in range(workers)]

    def run(shard: list[tuple[str, str]]) -> list[str]:
        import json

        proc = subprocess.run([sys.executable, "-c", _WORKER, device, mode],
                              input="\n".join(json.dumps(j) for j in shard), text=True,
                              capture_output=True, env=env, timeout=3600)
        return [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]

    with ThreadPoolExecutor(workers) as ex:
        lines = [ln for out in ex.map(run, shards) for ln in out]
    ok = sum(1 for ln in lines if ln.endswith('"ok"]'))
    return {"compiled": ok, "failed": len(jobs) - ok, "skipped": 0}
