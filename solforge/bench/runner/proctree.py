"""The process tree of a runner: finding, measuring and killing every process in it.

The judge is a child subreaper (``sandbox.become_subreaper``), so a runner's descendants
that outlive their parents are re-parented to the judge rather than to init: they are
still found (:func:`adopted_orphans`) and killed. Everything here reads ``/proc`` (Linux).

Not covered: processes that leave the tree *and* the session and the cgroup before the
kill and are not children of the judge (impossible without a second subreaper above it).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# pids of the runners this process started: their exit status belongs to ``subprocess``
MANAGED: set[int] = set()

# Processes a runner may legitimately keep busy after a call returns: compilers and
# compile workers (inductor's pool, nvcc/ptxas, the host C++ compiler, ninja).
COMPILERS = ("compile_worker", "ptxas", "nvcc", "cicc", "cudafe", "fatbinary", "nvlink",
              "ninja", "cc1plus", "cc1", "g++", "gcc", "c++", "clang", "ld", "as",
              "nvdisasm", "cuobjdump", "collect2")


def processes() -> Iterator[tuple[int, list[str]]]:
    """``(pid, fields)`` for every process, ``fields`` being /proc/<pid>/stat after the
    command name: ``fields[0]`` the state, ``[1]`` the parent, ``[3]`` the session."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3:
            yield int(d.name), fields


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (by the parent links in /proc)."""
    children: dict[int, list[int]] = {}
    for child, fields in processes():
        children.setdefault(int(fields[1]), []).append(child)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _live_tree(pid: int) -> set[int]:
    """Live descendants of ``pid`` and live members of its session, from one scan.

    Zombies are left out: they are dead already, and the runner itself stays a zombie
    until ``subprocess`` reaps it after the kill (counting it kept every kill looping for
    all its rounds: half a second per evaluation)."""
    children: dict[int, list[int]] = {}
    out: set[int] = set()
    dead: set[int] = set()
    for p, fields in processes():
        children.setdefault(int(fields[1]), []).append(p)
        if fields[0] in ("Z", "X"):
            dead.add(p)
        elif int(fields[3]) == pid:
            out.add(p)
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in dead:
                out.add(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _my_zombies() -> list[int]:
    """Exited children of this process that ``subprocess`` does not manage."""
    me = str(os.getpid())
    return [pid for pid, fields in processes()
            if fields[0] == "Z" and fields[1] == me and pid not in MANAGED]


def _kill(pids: set[int] | list[int]) -> None:
    for v in pids:
        try:
            os.kill(v, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(pid: int, members: Callable[[], list[int]] | None = None,
              rounds: int = 20) -> None:
    """SIGKILL ``pid``'s group, session, cgroup and descendants until none is left.

    The group and the cgroup go first (one signal each stops a fork bomb growing, without
    a scan of /proc under its load); then rounds of scans catch what left the group.
    """
    me = os.getpid()
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if members is not None:
        _kill([m for m in members() if m != me])
    for _ in range(rounds):
        victims = _live_tree(pid)
        if members is not None:
            victims.update(p for p in members() if _alive(p))
        victims.discard(me)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _kill(victims)
        _kill([pid])
        reap_orphans()
        if not victims:
            break
        time.sleep(0.02)


def reap_orphans() -> None:
    """Collect exited orphans re-parented to this (subreaper) process.

    Only zombies we did not start ourselves are reaped: ``subprocess`` must still see the
    real exit status of the runners it manages (a segfault must read as SIGSEGV).
    """
    for pid in _my_zombies():
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def cpu_seconds(pids: list[int], skip_compilers: bool = True) -> float:
    """CPU time (user + system, all threads) consumed so far by ``pids``, in seconds;
    compilers and compile workers left out when ``skip_compilers`` (and the tree is of a
    normal size: a process's command line is read under its memory-map lock, which a
    forking process holds)."""
    tick = os.sysconf("SC_CLK_TCK")
    skip_compilers = skip_compilers and len(pids) <= 64
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
            comm = fields[0].split("(", 1)[1]
            if skip_compilers and _is_compiler(pid, comm):
                continue
            rest = fields[1].split()
            total += int(rest[11]) + int(rest[12])
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


def _is_compiler(pid: int, comm: str) -> bool:
    if comm in COMPILERS:
        return True
    if not comm.startswith("python"):
        return False
    try:  # inductor's compile workers are Python processes: tell them by their arguments
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:6]
    except OSError:
        return False
    return any(b"compile_worker" in a for a in argv)


def reap_all(timeout_s: float = 2.0) -> None:
    """Reap adopted orphans until none is left dying (a killed fork bomb leaves hundreds
    of zombies; left to init they slow every /proc scan on the machine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reap_orphans()
        if not _my_zombies():
            return
        time.sleep(0.02)


def adopted_orphans() -> list[int]:
    """Children of this (subreaper) process that it did not start: descendants of a
    runner that outlived their parent. Processes in this process's own session (its
    compile workers) are not among them."""
    me, sid = str(os.getpid()), os.getsid(0)
    return [pid for pid, fields in processes() if pid not in MANAGED and fields[1] == me
            and int(fields[3]) != sid and fields[0] != "Z"]


__all__ = ["COMPILERS", "MANAGED", "adopted_orphans", "cpu_seconds", "descendants",
           "kill_tree", "reap_all", "reap_orphans"]
