"""On a CPU device, the judge and the runner measure on one and the same core.

The candidate is timed in its runner and the baselines in the judge: two processes, and
on a virtual machine two processes that the scheduler leaves on different cores can run
the same 20 us operation at 21 us and at 38 us at the same moment
(``benchmarks/results/2026-12-03-cpu``).
Pinned to one core for the timing phase, the two agreed within 3% run after run.

:func:`pinned` sets the affinity of the given processes (the judge itself and the
runner's whole tree) to :func:`timing_core` for the block and restores what each had.
Every timing on a CPU device holds the device's slot (``slots.py``), so only one judge
and one runner are pinned at a time; other work keeps every core.

Threads the given processes start inside the block get their process's mask back at its
end. Not covered: child processes started inside the block (they keep the one core), GPUs
(their kernels are timed on the device; nothing is pinned), other users' load on the timing
core, and machines where affinity cannot be set (then nothing
is pinned and the measurement goes on as before).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

from solforge import env

CORE_ENV = env.TIMING_CORE


def timing_core() -> int | None:
    """The core CPU timings run on: ``SOLFORGE_TIMING_CORE``, else the highest core this
    process may use (the first cores take most interrupts); None where affinity is not
    available."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = env.timing_core()
    if chosen is not None and chosen in allowed:
        return chosen
    return allowed[-1] if allowed else None


def _threads(pid: int) -> list[int]:
    """Every thread of ``pid`` (affinity is per thread on Linux)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


@contextlib.contextmanager
def pinned(pids: Iterable[int], device: str) -> Iterator[int | None]:
    """Pin ``pids`` to :func:`timing_core` for the block on a CPU device; yields the core
    (None when nothing was pinned)."""
    core = timing_core() if device == "cpu" else None
    if core is None:
        yield None
        return
    pids = list(pids)
    before: dict[int, set[int]] = {}
    for tid in (t for pid in pids for t in _threads(pid)):
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {core})
        except OSError:  # gone, or not ours to pin
            before.pop(tid, None)
    try:
        yield core
    finally:
        # threads started inside the block inherited the one core: they get their
        # process's mask back too (a candidate's background thread left on the timing
        # core shared it with whatever ran there, and got under a third of it: CI stop 39)
        now = {tid: before.get(tid, before[pid])
               for pid in pids if pid in before for tid in _threads(pid)}
        for tid, cores in {**before, **now}.items():
            try:
                os.sched_setaffinity(tid, cores)
            except OSError:  # gone
                pass
