"""The operating-system steps that confine one process, each applied where the OS allows it.

Between fork and exec (:func:`set_limits`, shared by the runner and the LLM worker's shell
tool, ``agents/shell.py``): death with its parent, no core dumps, CPU seconds, file size,
open files, address space on a CPU device, a new network namespace, the read-only
filesystem view (``fsview.py``); then, by the caller, privileges dropped to ``nobody``
(:func:`can_drop_privileges` says whether Python still runs so) or, on a hardened run
(:func:`hardened`) that keeps uid 0, every capability given up (bounding, inheritable and
ambient sets, :func:`_drop_capabilities`); :func:`confine_child` is the runner's whole
sequence, for an exec'd runner and a forked one (``zygote.py``) alike. Such a runner still
owns what root owns (caches, its working directory) but no longer overrides other users'
permissions: a cache directory owned by another user is read-only to it. After exec
(:func:`enter_sandbox`; a forked runner there too): a private umask and a non-dumpable
runner. On the judge's side: :func:`become_subreaper` and
:func:`protect_judge` (a non-dumpable judge, whose memory and environment a runner without
CAP_SYS_PTRACE cannot reach). :class:`SandboxConfig` holds the limits.

Not covered: starting, watching and killing a runner, and what its containment amounts to
(``sandbox.py``, whose docstring lists it); the environment a process starts with
(``environment.py``); the ``pids`` cgroup (``cgroups.py``); what the view is made of
(``fsview.py``).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from solforge import env
from solforge.bench.measure.slots import slots_dir
from solforge.bench.runner import fsview
from solforge.bench.runner.environment import runner_env

_CLONE_NEWNET = 0x40000000
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4


@dataclass
class SandboxConfig:
    """Limits for one runner process."""

    memory_mb: int = 16384          # resident memory (host); None-like 0 = unlimited
    cpu_seconds: int = 3600         # CPU time of the runner (its threads summed)
    file_mb: int = 2048             # largest file it may write (compile caches included)
    open_files: int = 4096
    isolate_network: bool = True
    drop_privileges: bool | None = None   # None: when root and the device is the CPU
    max_processes: int = 256        # descendants before the watchdog kills (fork bombs)
    max_tasks: int = 2048           # pids cgroup limit: processes and threads, all counted
    output_mb: int = 64             # stdout+stderr before the watchdog kills (floods)
    fs_view: bool | None = None     # None: the read-only view where the machine allows it
    extra_env: dict[str, str] = field(default_factory=dict)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux), so it can kill them all."""
    libc = _libc()
    if libc is None or not sys.platform.startswith("linux"):
        return False
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _unshare_network() -> bool:
    libc = _libc()
    if libc is None:
        return False
    return libc.unshare(_CLONE_NEWNET) == 0


def hardened(device: str) -> bool:
    """Whether runs on ``device`` get the capability drop and a non-dumpable judge."""
    return device == "cpu" or env.harden_gpu()


def protect_judge(device: str) -> bool:
    """Make this (judge) process non-dumpable, so a runner without CAP_SYS_PTRACE cannot
    read or write its memory or environment through /proc; only on hardened runs."""
    libc = _libc()
    if libc is None or not hardened(device):
        return False
    return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Give up every capability for good (still uid 0, but no ptrace, no DAC override,
    no admin): ambient cleared, bounding set emptied, then all three sets zeroed."""
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        if cap != 8:  # CAP_SETPCAP last: dropping the others needs it
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAPBSET_DROP, 8, 0, 0, 0)

    class _Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = _Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_Data * 2)()
    libc.capset(ctypes.byref(header), data)


_DROP_OK: bool | None = None


def _drop_to_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def can_drop_privileges() -> bool:
    """Whether a process running as ``nobody`` can still run Python, torch and solforge
    here (not when Python lives under root's private home, for example). Probed once."""
    global _DROP_OK
    if _DROP_OK is None:
        _DROP_OK = False
        if os.geteuid() == 0:
            env = runner_env("cpu", Path(tempfile.gettempdir()), {})
            try:
                r = subprocess.run([sys.executable, "-c", "import torch, solforge.bench.runner.process"],
                                   env=env, cwd="/", preexec_fn=_drop_to_nobody,
                                   capture_output=True, timeout=120)
                _DROP_OK = r.returncode == 0
            except (OSError, subprocess.SubprocessError):
                _DROP_OK = False
    return _DROP_OK


def fs_view_for(cfg: SandboxConfig, device: str, own: list[Path]) -> fsview.View | None:
    """The filesystem view a contained child gets (``own``: its directories), or None where
    it gets none (``cfg.fs_view`` False, ``SOLFORGE_FS_VIEW=0``, or the machine cannot)."""
    wanted = cfg.fs_view if cfg.fs_view is not None else env.fs_view()
    if not wanted or fsview.available():
        return None
    return fsview.View(writable=tuple(str(p.resolve()) for p in own),
                       private_shm=not device.startswith("cuda"),
                       shared=(str(slots_dir().resolve()),))


def set_limits(cfg: SandboxConfig, device: str, view: fsview.View | None = None) -> None:
    """A contained child's limits, between fork and exec: it dies with its parent, dumps no
    core, and is bounded in CPU seconds, file size, open files and (on a CPU device) address
    space; its network namespace is a new, empty one where ``cfg.isolate_network`` and the
    kernel allow; with ``view``, its filesystem is read-only but for the view's
    directories (``fsview.py``; a refusal leaves it without, which the judge's check of
    the child's mounts reports). The runner and the LLM worker's shell tool
    (``agents/shell.py``) share it."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cfg.cpu_seconds:
        resource.setrlimit(resource.RLIMIT_CPU, (cfg.cpu_seconds, cfg.cpu_seconds + 5))
    if cfg.file_mb:
        lim = cfg.file_mb << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim, lim))
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg.open_files, cfg.open_files))
    if device == "cpu" and cfg.memory_mb:
        # virtual memory is a fair proxy for host memory without CUDA's reservations
        lim = (cfg.memory_mb + 4096) << 20
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    if cfg.isolate_network:
        _unshare_network()
    if view is not None:
        try:
            fsview.enter(view)
        except OSError:
            pass


def confine_child(cfg: SandboxConfig, device: str, view: fsview.View | None,
                  cgroup: object | None, dropped: bool, strip_caps: bool) -> None:
    """Every step a runner takes before its own code, in the child: its cgroup, the limits
    and namespaces (:func:`set_limits`), then ``nobody`` (with a process limit) or, on a
    hardened root run, no capabilities; no new privileges either way. Between fork and
    exec for an exec'd runner (``sandbox.RunnerProcess``), right after the fork for one
    forked by the runner zygote (``zygote.py``)."""
    libc = _libc()
    if cgroup is not None:
        try:
            cgroup.join()  # type: ignore[attr-defined]
        except OSError:
            pass
    set_limits(cfg, device, view)
    if dropped:
        _drop_to_nobody()
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg.max_processes * 2,) * 2)
    if libc is not None:
        if strip_caps:
            _drop_capabilities(libc)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def enter_sandbox(device: str = "cpu") -> None:
    """Runner-side steps after exec, before any candidate code: a private umask, and on
    hardened runs a non-dumpable runner (exec made it dumpable again), so another
    candidate's runner of the same uid cannot reach its memory, nor its files through
    ``/proc/<runner>/root`` and ``cwd``, whatever its filesystem view."""
    os.umask(0o077)
    libc = _libc()
    if libc is not None and hardened(device):
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
