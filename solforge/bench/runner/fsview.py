"""A contained child's filesystem view: every mount read-only except its own directories.

:func:`enter` runs between fork and exec (``sandbox.set_limits`` calls it for a runner and
for the LLM worker's shell tool). In a new mount namespace whose mounts are all private
(nothing propagates back to the host), the child's own directories are bound onto
themselves, then every other mount is remounted read-only with a bind remount, which
changes that mount's flag in this namespace only: the judge and the rest of the machine
keep their writable view. A write to the installed solforge, to torch, to the user's home
or to a run's ledger fails with ``EROFS``, whatever the uid. On a CPU device the child's
``/dev/shm`` is a fresh tmpfs of its own; on a GPU it stays the host's, because torch's
CUDA IPC passes reference-count files there between judge and runner. ``/proc`` keeps its
own rules (ptrace access: the judge is non-dumpable on hardened runs).

Why system calls through ``ctypes`` and not bubblewrap or nsjail: neither is installed on
CI or in most containers, and the child's limits, cgroup, network namespace and
capability drop are already applied here between fork and exec; a wrapper process would
redo them in its own terms and sit between the judge and its runner (the kill of the
process tree, the channel's file descriptor). The view needs one namespace and one loop
over ``/proc/self/mountinfo``; util-linux ``unshare`` would add a process, not a feature.

Holds when: the process may create a mount namespace (root with ``CAP_SYS_ADMIN``: CI and
most containers run so) **and** the child then has no ``CAP_SYS_ADMIN``: hardened runs
drop every capability (``sandbox.hardened``), a uid dropped to ``nobody`` has none. A
runner that keeps its capabilities (a GPU run without ``SOLFORGE_HARDEN_GPU=1``) could
remount its view writable again: :func:`describe` says so, and the record carries it.

Not covered: an unprivileged user (no mount namespace without a user namespace, whose
mounts the child could remount writable: the run says so and keeps the guard's
detection); what the child may read (everything the uid may read, the installed
corpus's held-out shapes included); the writable directories themselves (its working
directory, temporary directory and caches are its own; the machine's slot directory is
shared by design, see ``measure/slots.py``); ``/dev/shm`` on a GPU; disk space.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
# per-mount options a bind remount must keep (changing a locked one is refused)
_KEEP = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC,
         "noatime": _MS_NOATIME, "nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME,
         "strictatime": _MS_STRICTATIME}
SHM = "/dev/shm"
# left as they are: procfs and what is mounted inside it
_UNTOUCHED = ("/proc",)


@dataclass(frozen=True)
class View:
    """What stays writable: ``writable`` directories (each bound onto itself) and, with
    ``private_shm``, a fresh ``/dev/shm``; the host's ``/dev/shm`` is kept otherwise."""

    writable: tuple[str, ...]
    private_shm: bool = True
    shared: tuple[str, ...] = field(default=())  # writable and shared with other processes

    def allowed(self) -> tuple[str, ...]:
        return (*self.writable, *self.shared, SHM)


def _unescape(s: str) -> str:
    """Mount points in mountinfo escape space, tab, newline and backslash as octal."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mounts(pid: int | str = "self") -> list[tuple[str, set[str]]]:
    """(mount point, per-mount options) of every mount ``pid`` sees, parents first."""
    out = []
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6:
            out.append((_unescape(parts[4]), set(parts[5].split(","))))
    return out


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mount(libc: ctypes.CDLL, src: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    if libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def enter(view: View) -> None:
    """Make this process's filesystem read-only but for ``view`` (see the module doc).
    Call it in a child between fork and exec, as root; raises OSError where the OS
    refuses (the caller's child then runs without the view, and the judge's
    :func:`verify` sees that)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    if view.private_shm and os.path.isdir(SHM):
        _mount(libc, "tmpfs", SHM, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    keep = view.allowed()
    for d in (*view.writable, *view.shared):
        _mount(libc, d, d, None, _MS_BIND | _MS_REC)
    for point, opts in mounts():
        if _under(point, keep) or _under(point, _UNTOUCHED) or "ro" in opts:
            continue
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for name, bit in _KEEP.items():
            if name in opts:
                flags |= bit
        try:
            _mount(libc, None, point, None, flags)
        except OSError:
            if os.path.ismount(point) or point == "/":
                raise
            # a mount point hidden by a later mount or gone meanwhile: nothing to reach
    # the working directory was entered before the binds: enter it again through them
    cwd = os.getcwd()
    os.chdir("/")
    os.chdir(cwd)


def writable_mounts(pid: int | str, view: View) -> list[str]:
    """Mounts ``pid`` sees writable that ``view`` does not allow ([] when it holds)."""
    keep = view.allowed()
    top = dict(mounts(pid))  # a mount point mounted over twice: the last one is seen
    return [p for p, opts in top.items()
            if "rw" in opts and not _under(p, keep) and not _under(p, _UNTOUCHED)]


def verify(pid: int, view: View) -> str:
    """'' when process ``pid`` has ``view``; else why not (read from /proc by the judge,
    before any candidate code runs in it)."""
    try:
        if os.readlink(f"/proc/{pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt"):
            return "no mount namespace of its own"
        left = writable_mounts(pid, view)
    except OSError as e:
        return f"its mounts could not be read ({e.strerror})"
    if left:
        return "still writable: " + ", ".join(left[:6])
    return ""


_PROBE: str | None = None


def available() -> str:
    """'' when this machine can give a child the view, else why not (probed once, in a
    throwaway child, as the runners get it)."""
    global _PROBE
    if _PROBE is None:
        if not sys.platform.startswith("linux"):
            _PROBE = "not Linux"
        elif os.geteuid() != 0:
            _PROBE = "not root (a mount namespace needs CAP_SYS_ADMIN)"
        else:
            _PROBE = _probe()
    return _PROBE


def _probe() -> str:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="solforge-fsview-") as d:
        view = View(writable=(d,))
        code = ("import os,sys\nfrom solforge.bench.runner.fsview import writable_mounts, View\n"
                f"open(os.path.join({d!r}, 'w'), 'w').write('x')\n"
                f"left = writable_mounts('self', View(writable=({d!r},)))\n"
                "print('LEFT', ','.join(left))")
        def pre() -> None:
            try:
                enter(view)
            except OSError:
                os._exit(3)

        try:
            r = subprocess.run([sys.executable, "-c", code], preexec_fn=pre, cwd=d,
                               capture_output=True, text=True, timeout=60, check=False,
                               env={**os.environ, "PYTHONPATH": _src_root()})
        except (OSError, subprocess.SubprocessError) as e:
            return f"the probe failed to start: {e}"
        if r.returncode == 3:
            return "the OS refused a mount namespace (unshare or mount failed)"
        line = [x for x in r.stdout.splitlines() if x.startswith("LEFT")]
        if r.returncode != 0 or not line:
            return f"the probe failed: {(r.stderr or r.stdout)[-300:]}"
        left = line[0][len("LEFT "):].strip()
        return f"mounts stayed writable: {left}" if left else ""


def _src_root() -> str:
    import solforge

    root = str(Path(solforge.__file__).resolve().parents[1])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


def describe(device_hardened: bool, dropped: bool) -> str:
    """One line for the record: what a runner's filesystem view is on this machine."""
    why = available()
    if why:
        return (f"not contained: {why}; candidate code can write what this user can, and "
                "the evaluator's self-check detects changes to its own files")
    if not device_hardened and not dropped:
        return ("read-only except the runner's own directories, but the runner keeps its "
                "capabilities (GPU runs are hardened only with SOLFORGE_HARDEN_GPU=1) and "
                "could remount it writable")
    return "read-only except the runner's own directories"


__all__ = ["View", "available", "describe", "enter", "mounts", "verify", "writable_mounts"]
