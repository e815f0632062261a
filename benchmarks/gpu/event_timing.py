"""CUDA-event timing for the library-kernel probes (``depthwise_probe.py``,
``scan_probe.py``): PyTorch's call and the library's timed in interleaved rounds, the
best round's median of each. Imported by the probes as a sibling module (they run as
scripts from the repository root, their own folder first on ``sys.path``).

Not covered: an L2 flush between calls or the evaluator's other care (its own harness,
``solforge.bench.measure.timing``, does that): a probe's figures compare two kernels on
one device under one method, nothing more."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def median_ms(fn: Callable[[], object], reps: int) -> float:
    """The median of ``reps`` calls of ``fn``, each between two CUDA events."""
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))


def interleaved_ms(ref: Callable[[], object], lib: Callable[[], object], reps: int,
                   rounds: int = 3, warmup: int = 2) -> tuple[float, float]:
    """(ref, lib): ``warmup`` calls of each, then ``rounds`` rounds each timing ``ref``
    and then ``lib`` (:func:`median_ms`); the best round of each."""
    for _ in range(warmup):
        ref(), lib()
    t_ref, t_lib = [], []
    for _ in range(rounds):
        t_ref.append(median_ms(ref, reps))
        t_lib.append(median_ms(lib, reps))
    return min(t_ref), min(t_lib)


def add_speeds(row: dict, moved_bytes: int) -> None:
    """``speedup`` (``torch_ms / library_ms``) and each side's GB/s over ``moved_bytes``,
    into a probe's ``row`` holding ``torch_ms`` and ``library_ms``."""
    row["speedup"] = row["torch_ms"] / row["library_ms"]
    row["library_gb_s"] = moved_bytes / row["library_ms"] / 1e6
    row["torch_gb_s"] = moved_bytes / row["torch_ms"] / 1e6
