"""The reference's counted work (FLOPs, bytes) per workload, counted once and cached.

Counting runs the reference once under a counting mode, inside the device's slot, held
shared (its kernels must not time-slice with another evaluator's measurement; nothing in
it is timed: ``judge/performance._count_work``). It is the same for
every candidate of a workload, so the judge counts it once per (problem content, workload,
input shapes and dtypes, device, libraries) and keeps it in the baselines' SQLite cache
(a count costs 1-2 s of the slot: benchmarks/results/FINDINGS.md, "work counts").

Not covered: a reference whose counts depend on its input *values* (a router's choices):
the first count stands for the later evaluations of that workload, which see other
values of the same distribution. A failed count is not cached (it is tried again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from solforge.bench.baselines.cache import BaselineCache, baseline_key
from solforge.bench.measure.machine import device_name
from solforge.problems.spec import Problem, Workload


def _signature(inputs: list[Any]) -> list[Any]:
    return [[list(x.shape), str(x.dtype)] if isinstance(x, torch.Tensor) else repr(x)[:80]
            for x in inputs]


# bumped whenever what a count holds changes (2: tensor FLOPs split by op family and dtype)
COUNTING_VERSION = 2


def work_key(problem: Problem, w: Workload, device: str, inputs: list[Any]) -> str:
    # the counting's version is part of the key: counts made before the split by op
    # family (sol/units.py) lack it and would bound every GEMM at one unit
    return baseline_key(problem.content_hash, w.name, w.params_json(), device_name(device),
                        "work", {"inputs": _signature(inputs), "counting": COUNTING_VERSION})


def counted_once(problem: Problem, w: Workload, device: str, inputs: list[Any],
                 count: Callable[[], Any]) -> Any:
    """The cached count of this workload, else ``count()`` (a ``Work``, or a string saying
    why counting failed), cached when it is a ``Work``."""
    from solforge.sol.work import Work

    key = work_key(problem, w, device, inputs)
    cache = BaselineCache()
    try:
        hit = cache.get(key)
        if hit is not None:
            try:
                return Work.model_validate(hit)
            except ValueError:  # an entry of another version: count again
                pass
        work = count()
        if isinstance(work, Work):
            cache.put(key, work.model_dump())
        return work
    finally:
        cache.close()
