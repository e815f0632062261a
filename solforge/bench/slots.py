"""GPU slots: one timing at a time per device, across every process on the machine.

Any code that measures time on a GPU, or runs something that could disturb a measurement
(an agent's ``run_command`` or ``profile``), holds the device's slot. The slot is an
``fcntl`` lock on a file in the solforge cache, so judges of different runs and agents in
other processes queue for it too; the OS releases it when its holder dies (``kill -9``
included), so a crash never leaves a slot taken.

Correctness trials and builds do not take the slot: they may overlap another candidate's
timing only on the CPU side. On a CPU device the slot serialises timing the same way.

Not covered: other users' processes on the same GPU that do not use solforge.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from solforge.bench.sandbox import cache_dir

_HELD: dict[str, int] = {}


def _lock_path(device: str) -> str:
    d = cache_dir() / "slots"
    d.mkdir(parents=True, exist_ok=True)
    name = device.replace(":", "_")
    if device.startswith("cuda"):
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        idx = device.split(":")[1] if ":" in device else "0"
        if vis:
            ids = [v.strip() for v in vis.split(",") if v.strip()]
            if idx.isdigit() and int(idx) < len(ids):
                name = f"cuda_{ids[int(idx)]}"
    return str(d / f"{name}.lock")


@contextlib.contextmanager
def device_slot(device: str, timeout_s: float | None = None) -> Iterator[float]:
    """Hold ``device``'s slot for the block; yields the seconds spent waiting for it.

    Re-entrant within a process (a judge timing both a candidate and its baselines).
    """
    path = _lock_path(device)
    if path in _HELD:
        _HELD[path] += 1
        try:
            yield 0.0
        finally:
            _HELD[path] -= 1
        return
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    t0 = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    raise TimeoutError(f"{device}'s timing slot stayed busy for {timeout_s} s")
                time.sleep(0.01)
        _HELD[path] = 1
        try:
            yield time.monotonic() - t0
        finally:
            del _HELD[path]
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
