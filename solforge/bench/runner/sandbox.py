"""Containment for candidate code: how a runner process is started, limited and killed.

What a runner gets (each applied where the OS allows it; :func:`capabilities` reports
what actually holds on this machine, and evaluation records carry it):

- a new session and process group, a private working directory as cwd, HOME and TMPDIR;
- an environment rebuilt from an allowlist: API keys, tokens, cloud credentials and every
  variable not needed to run Python, CUDA and Triton are gone;
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
  read its environment (nor the caller's, which keeps its capabilities). It still owns
  what root owns (caches, its working directory) but no longer overrides other users'
  permissions: a cache directory owned by another user is read-only to it. GPU runs are not hardened by default until CUDA IPC is verified
  under it on the target machine;
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

import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import solforge
from solforge import env
from solforge.bench.measure.slots import slots_dir
from solforge.bench.runner import caches, cgroups, fsview
from solforge.bench.runner.channel import Channel, socket_pair
from solforge.bench.runner.output_tail import OutputTail
from solforge.bench.runner.proctree import MANAGED, descendants, kill_tree

# Variables a runner may inherit; everything else (keys, tokens, credentials) is dropped.
_ENV_ALLOW = (
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_MODULE_LOADING",
    "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV",
    "TORCH_CUDA_ARCH_LIST", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH",
    "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", env.CACHE, env.CUDA_ARCH,
    "CUTE_DSL_ARCH", "CUTE_DSL_CACHE_DIR",
)
# Variables the judge never inherits from its caller (an agent holding API keys): a
# runner could read the judge's environment through /proc where it is not hardened.
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH",
                 "COOKIE", "SESSION", "PRIVATE")
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


def judge_env(env: dict[str, str]) -> dict[str, str]:
    """The caller's environment minus anything that looks like a secret."""
    return {k: v for k, v in env.items()
            if not any(w in k.upper() for w in _SECRET_WORDS)}


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


# Idle OpenMP threads spin for a while after each parallel region and steal the cores a
# runner is being timed on (benchmarks/results/FINDINGS.md, "OpenMP"): every solforge
# process waits passively instead.
QUIET_THREADS = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}

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


def runner_env(device: str, workdir: Path, extra: dict[str, str]) -> dict[str, str]:
    """A contained child's environment: the allowlist, HOME and TMPDIR in ``workdir``, and
    every build cache under ``workdir/cache`` (its own: ``caches.py``)."""
    cache = workdir / "cache"
    out = {k: v for k, v in os.environ.items() if k in _ENV_ALLOW}
    out.update({
        "HOME": str(workdir), "TMPDIR": str(workdir / "tmp"), "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        # the candidate's own compile caches (caches.py), inside its writable directory
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "CUTE_DSL_CACHE_DIR": str(cache / "cute_dsl"),
        env.CACHE: str(cache),
        # Triton's autotuner keeps its choice per (kernel source, config list, key) on disk:
        # every fresh runner re-tuned the same kernels on every workload otherwise. A choice
        # only decides speed, which is measured anyway; correctness is checked on any.
        "TRITON_CACHE_AUTOTUNING": "1",
    })
    out.update(QUIET_THREADS)
    out[env.SLOTS] = str(slots_dir())  # the judge's: the runner's TMPDIR is private
    # the package must stay importable from the private working directory
    src_root = str(Path(solforge.__file__).resolve().parents[1])
    out["PYTHONPATH"] = os.pathsep.join(p for p in (src_root, out.get("PYTHONPATH", "")) if p)
    if device == "cpu":
        out["CUDA_VISIBLE_DEVICES"] = ""
        out["TRITON_INTERPRET"] = "1"
    out.update(extra)
    return out


def fs_view_for(cfg: SandboxConfig, device: str, own: list[Path]) -> fsview.View | None:
    """The filesystem view a contained child gets (``own``: its directories), or None where
    it gets none (``cfg.fs_view`` False, ``SOLFORGE_FS_VIEW=0``, or the machine cannot)."""
    wanted = cfg.fs_view if cfg.fs_view is not None else env.fs_view()
    if not wanted or fsview.available():
        return None
    return fsview.View(writable=tuple(str(p.resolve()) for p in own),
                       private_shm=not device.startswith("cuda"),
                       shared=(str(slots_dir().resolve()),))


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
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "solforge.bench.runner.process", "--fd", str(fd),
             "--device", device],
            cwd=self.workdir, env=child_env, pass_fds=(fd,), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=self._preexec,
        )
        child_sock.close()
        MANAGED.add(self.proc.pid)
        self.output = OutputTail(self.proc.stdout)

    def _preexec(self) -> None:  # runs in the child between fork and exec
        cfg = self.config
        libc = _libc()
        if self.cgroup is not None:
            try:
                self.cgroup.join()
            except OSError:
                pass
        set_limits(cfg, self.device, self.view)
        if self.dropped:
            _drop_to_nobody()
            resource.setrlimit(resource.RLIMIT_NPROC, (cfg.max_processes * 2,) * 2)
        if libc is not None:
            if self.strip_caps:
                _drop_capabilities(libc)
            libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)

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


def enter_sandbox(device: str = "cpu") -> None:
    """Runner-side steps after exec, before any candidate code: a private umask, and on
    hardened runs a non-dumpable runner (exec made it dumpable again), so another
    candidate's runner of the same uid cannot reach its memory, nor its files through
    ``/proc/<runner>/root`` and ``cwd``, whatever its filesystem view."""
    os.umask(0o077)
    libc = _libc()
    if libc is not None and hardened(device):
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


__all__ = [
    "Channel",
    "RunnerProcess",
    "SandboxConfig",
    "become_subreaper",
    "capabilities",
    "containment_note",
    "descendants",
    "hardened",
    "judge_env",
    "kill_tree",
    "protect_judge",
]
