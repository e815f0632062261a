"""GPU slots: one timing at a time per device, across every process on the machine.

Any code that measures time on a GPU, or runs something that could disturb a measurement
(an agent's ``run_command`` or ``profile``), holds the device's slot. The slot is an
``fcntl`` lock on a file in the machine's slot directory (:func:`slots_dir`, not the
solforge cache: two processes with different caches, such as pytest-xdist workers with one
isolated cache each, still share one GPU and must queue for it), so judges of different
runs and agents in other processes queue for it too; the OS releases it when its holder
dies (``kill -9`` included), so a crash never leaves a slot taken.

On a GPU the correctness trials and the policy's traced call hold the slot as well: their
kernels would otherwise time-slice with a kernel another evaluator is measuring. They hold
it **shared** (``device_slot(..., shared=True)``): several evaluators' trials run on the
GPU at once (their kernels time-slice with each other, which no measurement sees), and
so do the baselines' compiles and warm-ups (``performance.compile_holds_shared``: minutes
of CPU work around milliseconds of kernels), the count of a reference's work and a
runner's CUDA start-up, none of which times anything; a timing and an agent's command
hold it **exclusively** (the default): no other holder, shared or not, runs beside
them. An exclusive request that is waiting closes the gate to new shared holders
(a second lock file, ``<device>.gate``), so a steady stream of trials never starves a
timing: it waits only for the trials already running. Builds, imports and reference
construction take neither; they overlap another candidate's timing on the CPU side only.
On a CPU device the slot serialises timing the same way (the trials there are CPU work
like everything else and do not take it).

Every hold is appended to a log beside the lock (``held_intervals``), which is how the
throughput benchmark measures how busy a device was.

Not covered: other users' processes on the same GPU that do not use solforge; a process
that holds the slot shared and then asks for it exclusively (refused with an error: a
lock cannot be upgraded without a window another holder could take); processes
that see different slot directories (a different ``SOLFORGE_SLOTS``, or another user when
the shared directory is not writable to both: each then falls back to a directory of its
own uid and they no longer queue together).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from solforge import env

# the slots this process holds: lock path -> [nesting depth, shared?]
_HELD: dict[str, list] = {}
# Set for a command run while its parent holds the slot (``slot_env``): the command's own
# evaluations (an agent running `solforge bench` in its shell) are inside that hold already
# and must not wait for it, which would be a deadlock until the command's timeout.
HELD_ENV = env.SLOT_HELD
# Purposes a hold is logged with: evaluation work, or a runner's CUDA start-up.
EVALUATION = "evaluation"
RUNNER_START = "runner_start"
# How a shared hold is marked in the log (after its purpose)
SHARED = "shared"
# The phase an evaluation is in while it waits for the slot (``wait_hook``)
SLOT_WAIT = "slot_wait"
# Called with True when this process starts waiting for a slot another process holds, and
# with False once it has it (the judge reports the wait as a phase of its own)
wait_hook: Callable[[bool], None] | None = None


# A directory named here is used as it is; judges pass theirs to their runners, whose
# TMPDIR is private, so a runner's CUDA start-up queues on the same lock.
SLOTS_ENV = env.SLOTS


def slots_dir() -> Path:
    """The machine's slot directory: ``$SOLFORGE_SLOTS``, else ``/tmp/solforge-slots``
    (sticky and writable by all, like ``/tmp``), else, where that one belongs to another
    user and is not writable, ``/tmp/solforge-slots-<uid>``."""
    d = env.slots_dir()
    if d is not None:
        d.mkdir(parents=True, exist_ok=True)
        return d
    base = Path("/tmp") if os.path.isdir("/tmp") else Path(tempfile.gettempdir())
    shared = base / "solforge-slots"
    try:
        shared.mkdir(exist_ok=True)
        # a link planted there by another user is neither followed nor chmod-ed through
        if not shared.is_symlink():
            if shared.stat().st_uid == os.getuid():
                os.chmod(shared, 0o1777)  # mkdir's mode is cut by the umask
            if os.access(shared, os.W_OK | os.X_OK):
                return shared
    except OSError:
        pass
    own = base / f"solforge-slots-{os.getuid()}"
    own.mkdir(exist_ok=True)
    return own


def _open(path: str, flags: int) -> int:
    # O_NOFOLLOW: in a directory every user can write, a planted link must not redirect us
    fd = os.open(path, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        os.fchmod(fd, 0o666)  # other users' processes queue on the same file
    except OSError:
        pass
    return fd


def _lock_path(device: str) -> str:
    d = slots_dir()
    name = device.replace(":", "_")
    if device.startswith("cuda"):
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        idx = device.split(":")[1] if ":" in device else "0"
        if vis:
            ids = [v.strip() for v in vis.split(",") if v.strip()]
            if idx.isdigit() and int(idx) < len(ids):
                name = f"cuda_{ids[int(idx)]}"
    return str(d / f"{name}.lock")


def _log(lock_path: str, start: float, end: float, purpose: str, shared: bool = False) -> None:
    """Append the hold to ``<slot>.log`` (wall-clock seconds, pid, purpose, and ``shared``
    for a shared hold): how busy a device was, and with what. Shared holds overlap each
    other: a busy fraction takes the union of the intervals."""
    log = lock_path[:-len(".lock")] + ".log"
    try:
        # bounded: a busy machine starts a fresh log rather than filling the disk
        big = os.path.exists(log) and os.path.getsize(log) > (16 << 20)
        fd = _open(log, os.O_WRONLY | (os.O_TRUNC if big else os.O_APPEND))
        with os.fdopen(fd, "w") as f:
            f.write(f"{start:.6f} {end:.6f} {os.getpid()} {purpose}"
                    f"{' ' + SHARED if shared else ''}\n")
    except OSError:
        pass


def read_log(log: str | Path) -> list[tuple[float, float, int, str, bool]]:
    """The holds a slot log records (``_log``): (start, end, pid, purpose, shared), in
    wall-clock seconds; [] for a missing or unreadable log (a line it cannot read ends
    the reading there)."""
    out = []
    try:
        with open(log) as f:
            for line in f:
                a, b, pid, *rest = line.split()
                out.append((float(a), float(b), int(pid), rest[0] if rest else EVALUATION,
                            SHARED in rest[1:]))
    except (OSError, ValueError):
        pass
    return out


def held_intervals(device: str, since: float = 0.0, exclude: tuple[str, ...] = (),
                   shared: bool | None = None) -> list[tuple[float, float]]:
    """The (start, end) wall-clock intervals ``device``'s slot was held, since ``since``,
    leaving out holds whose purpose is in ``exclude`` (e.g. ``RUNNER_START``); with
    ``shared`` True or False, only the shared or only the exclusive holds. Shared holds
    may overlap each other."""
    log = _lock_path(device)[:-len(".lock")] + ".log"
    return [(a, b) for a, b, _pid, purpose, was_shared in read_log(log)
            if b >= since and purpose not in exclude and (shared is None or shared == was_shared)]


def covered_seconds(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] that the intervals cover (overlaps counted once)."""
    total, cur = 0.0, lo
    for a, b in sorted(intervals):
        a, b = max(a, cur), min(b, hi)
        if b > a:
            total += b - a
            cur = b
    return total


def slot_env(device: str) -> dict[str, str]:
    """Environment for a child process started while this one holds ``device``'s slot."""
    return {HELD_ENV: _lock_path(device)}


def held_slot_env(device: str) -> dict[str, str]:
    """``slot_env`` when this process holds ``device``'s slot now, else nothing: a runner
    started inside a hold must not wait for it (see ``bench/runner/process.py``)."""
    return slot_env(device) if _lock_path(device) in _HELD else {}


def _held_by_parent(path: str) -> bool:
    return path in env.held_slots()


# seconds the candidate's clock stood still in this process, in all, and how deeply
# nested the blocks that stop it are (see clock())
_WAITED = [0.0]
_STOPPED = [0]


def clock() -> float:
    """A monotonic clock that stands still while this process waits for a device's slot,
    or does work of its own inside :func:`not_the_candidates_time`.

    The judge's time limits run on it: with several evaluators on one GPU a candidate can
    wait minutes for other evaluators' measurements, and a re-measurement can spend minutes
    compiling baselines (``benchmarks/results/2026-12-02-h200-s7``); neither is the
    candidate's time. Not covered: waits of other processes (a runner's
    own start-up wait is bounded by ``SLOT_WAIT_S`` there)."""
    return time.monotonic() - _WAITED[0]


@contextlib.contextmanager
def not_the_candidates_time() -> Iterator[None]:
    """Stop :func:`clock` for the block (nested blocks and slot waits inside count once)."""
    t0 = time.monotonic()
    _STOPPED[0] += 1
    try:
        yield
    finally:
        _STOPPED[0] -= 1
        if _STOPPED[0] == 0:
            _WAITED[0] += time.monotonic() - t0


def _take(fd: int, gate: int, shared: bool, gated: list[bool]) -> bool:
    """One non-blocking try at the slot; True when it is held. Shared: only while no
    exclusive request waits (the gate is free), then the slot shared. Exclusive: the gate
    first (kept, ``gated``, while it waits: no new shared holder gets in), then the slot."""
    if shared:
        try:
            fcntl.flock(gate, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a timing waits: it goes first
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
    if not gated[0]:
        try:
            fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
            gated[0] = True
        except BlockingIOError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(gate, fcntl.LOCK_UN)
    gated[0] = False
    return True


@contextlib.contextmanager
def device_slot(device: str, timeout_s: float | None = None, purpose: str = EVALUATION,
                shared: bool = False) -> Iterator[float]:
    """Hold ``device``'s slot for the block; yields the seconds spent waiting for it.

    ``shared``: beside other shared holders, never beside an exclusive one (see the module
    docstring); the default is exclusive. Re-entrant within a process (a judge timing both
    a candidate and its baselines: a nested request of either kind inside an exclusive
    hold, or a shared one inside a shared hold), and inside a process tree whose root
    holds it and said so (``slot_env``). An exclusive request inside this process's own
    shared hold raises ``RuntimeError``.
    """
    path = _lock_path(device)
    if _held_by_parent(path):
        yield 0.0
        return
    if path in _HELD:
        if _HELD[path][1] and not shared:
            raise RuntimeError(f"{device}'s slot is held shared by this process: it cannot "
                               "be taken exclusively inside that hold (end the shared "
                               "block first)")
        _HELD[path][0] += 1
        try:
            yield 0.0
        finally:
            _HELD[path][0] -= 1
        return
    fd = _open(path, os.O_RDWR)
    gate = _open(path[:-len(".lock")] + ".gate", os.O_RDWR)
    gated = [False]
    t0 = time.monotonic()
    waiting = False
    try:
        try:
            while not _take(fd, gate, shared, gated):
                if not waiting and wait_hook is not None:
                    wait_hook(True)
                waiting = True
                if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                    raise TimeoutError(
                        f"{device}'s timing slot stayed busy for {timeout_s} s") from None
                time.sleep(0.01)
        finally:
            if gated[0]:  # gave up while holding the gate: open it again
                fcntl.flock(gate, fcntl.LOCK_UN)
            if waiting and wait_hook is not None:
                wait_hook(False)
        if waiting and not _STOPPED[0]:  # inside a stopped block it counts once, there
            _WAITED[0] += time.monotonic() - t0
        _HELD[path] = [1, shared]
        start = time.time()
        try:
            yield time.monotonic() - t0
        finally:
            del _HELD[path]
            _log(path, start, time.time(), purpose, shared)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(gate)
        os.close(fd)
