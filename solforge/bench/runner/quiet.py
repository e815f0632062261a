"""Quiet measurements: while one evaluator times a candidate on a device, the runners of
the other evaluators on that device are stopped (SIGSTOP) and continued afterwards.

Why: the device's slot keeps other evaluators' measurements and GPU checks apart, not what
their candidates do outside it. A hostile candidate's background thread or child process
keeps the GPU (time-slicing between contexts) and the host busy meanwhile.

**Opt-in** (``SOLFORGE_QUIET_DEVICE=1``): stopping other runners also pauses their imports
and in-process builds, so builds overlap other candidates' timings less. The shared slot
lock alone removes the false ``off_device_work`` alarms this was written for; neither what
this adds nor what it costs has been measured (``benchmarks/results/2026-12-01-h200-s5``).
``judge/performance._timing``
holds other runners still around the measurement only (candidate timing, baselines, the
judge's clock), never around a compile: a stopped process may hold a compile cache's file
lock.

Registry: a file per runner under ``<slots dir>/<device>.runners/``
(``slots.slots_dir``), named by its pid, holding the pid's start time (a reused pid does not match it) and its judge's pid. A
judge's own runners are not stopped by it; a runner its judge froze itself
(``RunnerHandle.frozen``) carries a marker and is not continued by another judge.

Not covered: processes that left the runner's process tree (``descendants``); work
already queued on the GPU by a stopped process (it drains); other users' processes. Time
stopped counts against the stopped candidates' own deadlines (a measurement's seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from solforge import env
from solforge.bench.runner.proctree import descendants

ENV = env.QUIET_DEVICE


def enabled() -> bool:
    return env.quiet_device()


def _registry(device: str) -> Path:
    from solforge.bench.measure.slots import _lock_path

    d = Path(_lock_path(device)[:-len(".lock")] + ".runners")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def register(device: str, pid: int, judge: int | None = None) -> None:
    """Record ``pid`` as a runner of ``judge`` (this process by default) on ``device``."""
    entry = {"pid": pid, "start": _start_time(pid), "judge": judge or os.getpid()}
    (_registry(device) / str(pid)).write_text(json.dumps(entry))


def unregister(device: str, pid: int) -> None:
    for name in (str(pid), f"{pid}.frozen"):
        with contextlib.suppress(OSError):
            (_registry(device) / name).unlink()


def mark_frozen(device: str, pid: int, frozen: bool) -> None:
    """Say that ``pid``'s own judge has stopped it: another judge must not continue it."""
    marker = _registry(device) / f"{pid}.frozen"
    if frozen:
        marker.touch()
    else:
        with contextlib.suppress(OSError):
            marker.unlink()


def _others(device: str) -> list[dict]:
    """Live runners of other judges on ``device``; stale entries are removed."""
    me, out = os.getpid(), []
    for f in _registry(device).iterdir():
        if not f.name.isdigit():
            continue
        try:
            entry = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if _start_time(int(entry["pid"])) != entry.get("start"):
            with contextlib.suppress(OSError):
                f.unlink()  # the runner is gone (or its pid reused)
            continue
        if entry.get("judge") != me:
            out.append(entry)
    return out


def _signal_tree(pids: list[tuple[int, int | None]], sig: int) -> None:
    for pid, start in pids:
        if _start_time(pid) == start:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


@contextlib.contextmanager
def hold_still(device: str) -> Iterator[int]:
    """Stop the other judges' runners on ``device`` for the block (when :func:`enabled`);
    yields how many processes were stopped."""
    if not enabled():
        yield 0
        return
    stopped: list[tuple[int, list[tuple[int, int | None]]]] = []
    for entry in _others(device):
        root = int(entry["pid"])
        tree = [(p, _start_time(p)) for p in (root, *descendants(root))]
        _signal_tree(tree, signal.SIGSTOP)
        stopped.append((root, tree))
    try:
        yield sum(len(t) for _, t in stopped)
    finally:
        registry = _registry(device)
        for root, tree in stopped:
            if not (registry / f"{root}.frozen").exists():
                _signal_tree(tree, signal.SIGCONT)


__all__ = ["ENV", "enabled", "hold_still", "mark_frozen", "register", "unregister"]
