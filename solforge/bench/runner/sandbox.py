"""Containment for candidate code: how a runner process is started, watched and killed.

:class:`RunnerProcess` starts one with all of the list below (on a CPU it is forked from
the judge's runner zygote, ``zygote.py``, which takes the same steps in the child);
:func:`capabilities` and :func:`containment_note` say what of it holds here. The steps
themselves are ``confinement.py``'s (limits, namespaces, privileges) and
``environment.py``'s.

What a runner gets (each applied where the OS allows it; :func:`capabilities` reports
what actually holds on this machine, and evaluation records carry it):

- a new session and process group, a private working directory as cwd, HOME and TMPDIR;
- an environment rebuilt from an allowlist (``bench/runner/environment.py``): no API
  keys, tokens or cloud credentials;
- resource limits: CPU seconds, file size, open files, core dumps off; address space on a
  CPU-only run (CUDA reserves huge virtual ranges, so on a GPU the judge watches resident
  memory instead and kills the runner over its limit);
- a process limit: a ``pids`` cgroup per runner where the machine has a writable one
  (``bench/runner/cgroups.py``; ``RLIMIT_NPROC`` binds only non-root users), and in every case the
  judge's watchdog, which kills the runner when its descendants exceed
  ``max_processes`` or its output exceeds ``output_mb`` (a flood);
- no network: a fresh network namespace with only a down loopback, when the process may
  create one (root, or unprivileged user namespaces);
- started as root: privileges dropped to ``nobody`` (on CPU runs by default; GPU runs keep
  the uid because CUDA IPC with the judge needs it), so the installed evaluator and the
  run's records are not writable; as an ordinary user they are writable by the same uid,
  which is why the judge also hashes its own files and flags any change (``guard.py``);
- "hardened" runs (CPU runs, or any run with ``SOLFORGE_HARDEN_GPU=1``): a root runner
  that keeps uid 0 loses every capability (bounding, inheritable and ambient sets), and
  the judge makes itself non-dumpable, so the runner can neither read nor write the
  judge's memory (``/proc/<judge>/mem``, ptrace: where the reference's outputs live) nor
  read its environment (nor the caller's, which keeps its capabilities; what such a
  runner still may: ``bench/runner/confinement.py``). GPU runs are not hardened by default
  until CUDA IPC is verified under it on the target machine;
- a filesystem view (``bench/runner/fsview.py``): every mount read-only in its own mount
  namespace except its working directory (with its temporary directory and its build
  caches, kept per candidate by ``bench/runner/caches.py``), its own ``/dev/shm`` on a CPU
  device, and the machine's slot directory; where the machine cannot give it (not root),
  the record says so and the guard's detection remains;
- killing: the whole process group, then every descendant found in /proc (the judge is a
  child subreaper, so even double-forked orphans of the runner come back to it).

Not covered (documented threat model, see docs/THREAT_MODEL.md): kernel exploits;
GPU-level isolation between processes (MPS/MIG are not used); side channels; disk space
(only the size of each file is limited); a root runner writing root-owned files where
the filesystem view cannot be had (the guard detects it); the environment of the *caller's* process, which
a runner with the caller's uid can read unless that process is non-dumpable; a machine
where none of the facilities above exist still gets the process boundary, the private
channel, the timeout, the watchdogs and the kill.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from solforge import env
from solforge.bench.runner import caches, cgroups, fsview
from solforge.bench.runner.channel import Channel, socket_pair
from solforge.bench.runner.confinement import (
    _CLONE_NEWNET,
    _PR_SET_NO_NEW_PRIVS,
    SandboxConfig,
    _drop_capabilities,
    _drop_to_nobody,
    _libc,
    become_subreaper,
    can_drop_privileges,
    confine_child,
    enter_sandbox,
    fs_view_for,
    hardened,
    protect_judge,
    set_limits,
)
from solforge.bench.runner.environment import QUIET_THREADS, judge_env, runner_env
from solforge.bench.runner.output_tail import OutputTail
from solforge.bench.runner.proctree import MANAGED, descendants, kill_tree
from solforge.bench.runner.zygote import Forked, Zygote, zygote_for


def capabilities() -> dict[str, bool]:
    """What containment this machine can give (probed in a throwaway child)."""
    probe = (
        "import ctypes,os;l=ctypes.CDLL(None,use_errno=True);"
        f"print(int(l.unshare({_CLONE_NEWNET})==0))"
    )
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=20).stdout.strip()
        netns = out == "1"
    except Exception:
        netns = False
    return {"process_group": True, "network_namespace": netns, "root": os.geteuid() == 0,
            "drop_privileges": can_drop_privileges(), "pids_cgroup": cgroups.available(),
            "subreaper": sys.platform.startswith("linux"), "fs_view": not fsview.available()}


def containment_note(device: str, cfg: SandboxConfig | None = None) -> str:
    """What runners on ``device`` will not get of their filesystem view, as a line for
    the console ('' when they get all of it); each runner's is checked when it starts
    (``RunnerProcess.containment``)."""
    cfg = cfg or SandboxConfig()
    if not (cfg.fs_view if cfg.fs_view is not None else env.fs_view()):
        return (f"no read-only filesystem view ({env.FS_VIEW}=0): candidate code can write "
                "what this user can; the evaluator's self-check detects changes to its files")
    why = fsview.available()
    if why:
        return (f"no read-only filesystem view ({why}): candidate code can write what this "
                "user can; the evaluator's self-check detects changes to its files")
    if os.geteuid() == 0 and not hardened(device):
        return (f"read-only filesystem view, but {device} runners keep their capabilities "
                f"and could undo it ({env.HARDEN_GPU}=1 hardens them)")
    return ""


class RunnerProcess:
    """A started runner: its process, its channel, its captured output."""

    def __init__(self, device: str, config: SandboxConfig | None = None) -> None:
        self.device = device
        self.config = cfg = config or SandboxConfig()
        self.workdir = Path(tempfile.mkdtemp(prefix="solforge-runner-"))
        (self.workdir / "tmp").mkdir()
        self.cache = self.workdir / "cache"
        self.cache.mkdir()
        self.candidate: str | None = None  # whose caches it holds (``assign``)
        drop = cfg.drop_privileges
        if drop is None:
            drop = device == "cpu" and can_drop_privileges()
        self.dropped = bool(drop and os.geteuid() == 0)
        if self.dropped:
            for d in (self.workdir, self.workdir / "tmp", self.cache):
                os.chown(d, 65534, 65534)
        self.channel, child_sock = socket_pair()
        fd = child_sock.fileno()
        child_env = runner_env(device, self.workdir, cfg.extra_env)
        self.strip_caps = os.geteuid() == 0 and not self.dropped and hardened(device)
        self.view = fs_view_for(cfg, device, [self.workdir])
        self.cgroup = cgroups.create(cfg.max_tasks)
        argv = [sys.executable, "-m", "solforge.bench.runner.process", "--fd", str(fd),
                "--device", device]
        zygote = zygote_for(device, child_env, self.workdir, cfg.extra_env)
        forked = zygote and self._fork(zygote, child_sock, child_env, argv)
        self.proc: subprocess.Popen | Forked
        if forked:
            self.proc = forked
        else:
            self.proc = subprocess.Popen(
                argv, cwd=self.workdir, env=child_env, pass_fds=(fd,), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=self._preexec,
            )
            child_sock.close()
            MANAGED.add(self.proc.pid)
        self.output = OutputTail(self.proc.stdout)

    def _fork(self, zygote: Zygote, child_sock: socket.socket, child_env: dict[str, str],
              argv: list[str]) -> Forked | None:
        """Ask the zygote for this runner; the exec'd way if it refuses or dies first."""
        out_r, out_w = os.pipe()
        status_r, status_w = os.pipe()
        stdout = open(out_r, "rb")  # noqa: SIM115 - the output pump owns it

        def fallback() -> subprocess.Popen:
            return subprocess.Popen(
                argv, cwd=self.workdir, env=child_env, pass_fds=(child_sock.fileno(),),
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=self._preexec)

        def settled() -> None:  # started one way or the other: only the child holds these
            child_sock.close()
            os.close(out_w)

        request = {"workdir": str(self.workdir), "env": child_env, "config": self.config,
                   "view": self.view, "cgroup": self.cgroup, "dropped": self.dropped,
                   "strip_caps": self.strip_caps}
        forked = zygote.spawn(request, (child_sock.fileno(), out_w, status_w), stdout,
                              status_r, fallback, settled)
        os.close(status_w)
        if forked is None:
            stdout.close()
            os.close(status_r)
            os.close(out_w)
        return forked

    def _preexec(self) -> None:  # runs in the child between fork and exec
        confine_child(self.config, self.device, self.view, self.cgroup, self.dropped,
                      self.strip_caps)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def assign(self, solution: Path) -> None:
        """Give this runner the build caches ``solution`` left in earlier runners (before
        any request about it); they are kept again when the runner is killed."""
        self.candidate = caches.key(solution)
        caches.seed(self.candidate, self.cache, 65534 if self.dropped else None)

    def containment(self) -> str:
        """What this runner's filesystem view is, checked in /proc from outside (call it
        before the candidate's code runs); '' when it is the read-only view."""
        if self.view is None:
            wanted = self.config.fs_view if self.config.fs_view is not None else env.fs_view()
            why = fsview.available() if wanted else f"turned off ({env.FS_VIEW}=0)"
            return (f"no read-only filesystem view: {why}; candidate code can write what "
                    "this user can, and the evaluator's self-check detects changes to its "
                    "own files")
        why = fsview.verify(self.pid, self.view)
        if why:
            return f"the read-only filesystem view did not hold: {why}"
        if not (self.strip_caps or self.dropped):
            return ("read-only filesystem view, but the runner keeps its capabilities and "
                    f"could remount it writable (GPU runs: {env.HARDEN_GPU}=1 hardens them)")
        return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def processes(self) -> list[int]:
        """The runner and every live process descended from it or in its cgroup."""
        pids = {self.pid, *descendants(self.pid)}
        if self.cgroup is not None:
            pids.update(self.cgroup.members())
        return sorted(pids)

    def hit_process_limit(self) -> bool:
        return self.cgroup is not None and self.cgroup.hit_limit()

    def rss_mb(self, pids: list[int] | None = None) -> float:
        """Resident memory of the runner and its descendants, in MiB.

        Resident sets, not proportional ones: reading ``smaps_rollup`` walks page tables
        under the memory-map lock, which a fork bomb holds most of the time (one read took
        seconds). Pages a forked child shares with the runner are counted once per child,
        so a forking solution meets the limit early; compilers are exec'd, not forked.
        """
        total = 0
        for pid in pids if pids is not None else [self.pid, *descendants(self.pid)]:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            except (OSError, ValueError):
                pass
        return total / 1024

    def kill(self) -> None:
        """Kill the runner, its process group and every descendant; reap them."""
        kill_tree(self.pid, self.cgroup.members if self.cgroup is not None else None)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        MANAGED.discard(self.proc.pid)
        self.channel.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        if self.candidate is not None and self.proc.poll() is not None:
            # every process of it is dead (the tree was killed first): nothing writes now
            caches.keep(self.candidate, self.cache)
            self.candidate = None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def describe_exit(self) -> str:
        rc = self.proc.poll()
        if rc is None:
            return "still running"
        if rc < 0:
            try:
                return f"killed by signal {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exited with code {rc}"


__all__ = [
    "QUIET_THREADS",
    "Channel",
    "RunnerProcess",
    "SandboxConfig",
    "become_subreaper",
    "can_drop_privileges",
    "capabilities",
    "containment_note",
    "descendants",
    "enter_sandbox",
    "fs_view_for",
    "hardened",
    "judge_env",
    "kill_tree",
    "protect_judge",
    "runner_env",
    "set_limits",
]
