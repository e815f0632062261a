"""The runner zygote: CPU runners forked from a process that imported torch once.

A runner's start-up is Python, torch and the compiler front end the policy trace needs:
about 3.3 CPU-seconds on the CI machine (torch 1.75, ``torch._dynamo`` 1.4), paid by
every candidate, most of a short CPU evaluation, and the largest cost of the CPU test
suite (benchmarks/results/FINDINGS.md, "The CPU suite in two processes"). The zygote
pays it once per judge: a child of the judge that runs :func:`process.preload` and then
forks one runner per request. The forked child takes every step an exec'd runner gets
from ``sandbox.RunnerProcess`` (a new session, its private working directory and
environment, ``confinement.confine_child``: cgroup, limits, namespaces, filesystem
view, ``nobody`` or no capabilities, no new privileges) and runs the same
:func:`process.run`. No candidate code ever runs in the zygote, so every runner is
still a fresh process for one candidate: a copy of one that has only imported modules.

The judge's requests and the zygote's replies (the child's pid) cross a socket pair only
the two hold; a child closes every descriptor but its channel and its output before
anything else. A child's exit status comes back over a pipe of its own, as
``subprocess.Popen.poll`` would give it (:class:`Forked`). The runner's descendants that
outlive it are still the judge's (the zygote is no subreaper: orphans go up to the judge,
which is one, ``proctree.adopted_orphans``).

Checked when it starts, else it refuses and every runner is exec'd as before: one Python
thread, no descriptor but its own, and no module state holding a path of its private
directories (HOME, TMPDIR, the build caches) outside the places each child points at its
own (:data:`REPOINTED`): a forked runner would otherwise write its caches into the
zygote's. A runner with an environment of its own (a builder's) is exec'd, and so is one
whose environment differs from the zygote's in anything but those directories (a
variable the judge's process changed since). ``SOLFORGE_RUNNER_FORK=0`` turns the zygote
off.

Not covered: GPU runners (a CUDA context does not survive a fork; they start as spares,
ahead of need); what forked siblings share that exec'd runners would not: the string-hash
seed, the address-space layout (randomised once per zygote) and the pages of the imported
modules (copy-on-write, so a write stays in the writer). Seen from outside, a forked
runner's ``/proc/<pid>/cmdline`` and ``environ`` are the zygote's (the environment it
runs with, and hands to its own children, is its own).
"""

from __future__ import annotations

import argparse
import linecache
import os
import pickle
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from collections import deque
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any, NoReturn

from solforge import env
from solforge.bench.runner.proctree import MANAGED

# how many zygotes one process starts at most (one lost to a kill is replaced)
MAX_STARTS = 3
# longest a request waits for the zygote's answer (its start: seconds); then it is killed
# and the runner exec'd, so a stuck zygote cannot hold a candidate past its own deadline
ANSWER_S = 300.0
# Module state that keeps a path of the zygote's directories (its working directory at
# import, or HOME, TMPDIR and the build caches), pointed at the child's own in every child
# (``_repoint``); anywhere else, the zygote refuses (``unfit``). Torch's config modules
# take some defaults from the working directory (``debug_dir_root``, ``cutlass_dir``).
REPOINTED = ("sys.path", "sys.argv", "sys.orig_argv", "sys.path_importer_cache", "os.environ",
             "posix.environ", "site.USER_BASE", "site.USER_SITE", "sysconfig._CONFIG_VARS",
             "multiprocessing.process.ORIGINAL_DIR", "torch._dynamo.package.DynamoCache",
             "inspect.modulesbyfile", "inspect._filesbymodname", "linecache.cache")
# ... and places that follow ``sys.path`` by themselves: a namespace package's path is
# computed again when the parent path it was computed from changes
FOLLOWS_SYS_PATH = ".__path__._last_parent_path"


# --- the judge's side ----------------------------------------------------------------------


class Forked:
    """A forked runner as its judge sees it: the part of ``subprocess.Popen`` that
    ``sandbox.RunnerProcess`` uses (``pid``, ``poll``, ``wait``, ``kill``, ``returncode``,
    ``stdout``). Its pid is known once the zygote has forked it (the first request may
    wait for the zygote's start); if the zygote refuses or dies first, ``fallback``
    starts the runner the exec'd way and this object stands for that process."""

    def __init__(self, zygote: Zygote, stdout: Any, status_fd: int,
                 fallback: Callable[[], subprocess.Popen], settled: Callable[[], None]) -> None:
        self.zygote = zygote
        self.stdout = stdout
        self.returncode: int | None = None
        self.args = ["solforge runner (forked)"]
        self._status = status_fd
        self._pid: int | None = None
        self._failed = False
        self._popen: subprocess.Popen | None = None
        self._fallback = fallback
        self._settled: Callable[[], None] | None = settled

    def _resolve(self) -> None:
        if self._settled is None:
            return
        self.zygote.resolve(self)
        if self._pid is None:
            self._popen = self._fallback()
            MANAGED.add(self._popen.pid)
        settled, self._settled = self._settled, None
        settled()

    @property
    def forked(self) -> bool:
        """True when the zygote forked it (False: exec'd after all)."""
        self._resolve()
        return self._popen is None

    @property
    def pid(self) -> int:
        self._resolve()
        if self._popen is not None:
            return self._popen.pid
        assert self._pid is not None
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        self._resolve()
        if self._popen is not None:
            self.returncode = self._popen.poll()
            return self.returncode
        if self._status >= 0:
            if not select.select([self._status], [], [], 0)[0]:
                return None
            data = os.read(self._status, 64)
            os.close(self._status)
            self._status = -1
            if data:
                self.returncode = int(data)
                return self.returncode
        # the zygote died before the runner: the runner was re-parented (to this process
        # where it is a subreaper, as a judge is)
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = 0, 0
            if not os.path.exists(f"/proc/{self.pid}"):
                self.returncode = -signal.SIGKILL
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            if self._status >= 0 and self._popen is None:
                select.select([self._status], [], [], 0.5 if left is None else min(left, 0.5))
            else:
                time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """One zygote process, started by this process, and the requests it still owes a pid."""

    def __init__(self, child_env: dict[str, str], workdir: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="solforge-zygote-"))
        (self.dir / "tmp").mkdir()
        (self.dir / "cache").mkdir()
        self.signature = signature(child_env, workdir)
        zenv = {k: v.replace(str(workdir), str(self.dir)) for k, v in child_env.items()}
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "solforge.bench.runner.zygote", "--fd", str(theirs.fileno()),
             "--dir", str(self.dir)],
            cwd=self.dir, env=zenv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        theirs.close()
        MANAGED.add(self.proc.pid)
        self.lock = threading.Lock()
        self.pending: deque[Forked] = deque()
        self.why = ""  # why it refused or is gone ('' while it serves)
        self.refused = False  # it started and found itself unfit (``unfit``)

    def spawn(self, request: dict[str, Any], fds: tuple[int, int, int], stdout: Any,
              status_r: int, fallback: Callable[[], subprocess.Popen],
              settled: Callable[[], None]) -> Forked | None:
        """Ask for a runner (``fds``: its channel, output and exit-status descriptors);
        None, at once, when this zygote is gone."""
        with self.lock:
            if self.why:
                return None
            try:
                socket.send_fds(self.sock, [pickle.dumps(request)], list(fds))
            except OSError as e:
                self._gone(f"the zygote's socket failed: {e}")
                return None
            f = Forked(self, stdout, status_r, fallback, settled)
            self.pending.append(f)
            return f

    def resolve(self, f: Forked) -> None:
        """Read replies until ``f`` has its pid, or the zygote refused or died."""
        with self.lock:
            while f._pid is None and not f._failed:
                try:
                    self.sock.settimeout(ANSWER_S)
                    data = self.sock.recv(1 << 16)
                except TimeoutError:
                    self.proc.kill()
                    data = b""
                except OSError:
                    data = b""
                if not data:
                    self._gone(self.why or "the zygote exited")
                    break
                msg = pickle.loads(data)
                if "ready" in msg:
                    if not msg["ready"]:
                        self.refused = True
                        self._gone(msg["why"])
                    continue
                done = self.pending.popleft()
                done._pid = msg["pid"]
                if done._pid is None:  # this one could not be forked: exec'd
                    done._failed = True
                else:
                    MANAGED.add(done._pid)

    def _gone(self, why: str) -> None:
        self.why = why
        while self.pending:
            self.pending.popleft()._failed = True
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def close(self) -> None:
        with self.lock:
            if not self.why:
                self._gone("closed")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        MANAGED.discard(self.proc.pid)


_LOCK = threading.Lock()
_CURRENT: list[Zygote] = []  # this process's zygote, the last one started
_STARTS = [0]


def signature(child_env: dict[str, str], workdir: Path) -> dict[str, str]:
    """A runner's environment with its own directory named ``{workdir}``: requests with
    the zygote's signature differ from its environment in their directories only."""
    return {k: v.replace(str(workdir), "{workdir}") for k, v in child_env.items()}


def zygote_for(device: str, child_env: dict[str, str], workdir: Path,
               extra: dict[str, str]) -> Zygote | None:
    """This process's zygote for a runner with ``child_env`` in ``workdir``, started on
    the first request; None where the runner is to be exec'd (see the module doc): not
    a CPU runner, or one with an environment of its own (``extra``: a builder's target
    architecture, a slot held by its judge), which starts no zygote."""
    if device != "cpu" or not env.runner_fork() or extra:
        return None
    with _LOCK:
        z = _CURRENT[-1] if _CURRENT else None
        if z is not None and z.refused:
            return None  # its reason holds for a new one too
        if z is None or (z.why and _STARTS[0] < MAX_STARTS):
            _STARTS[0] += 1
            z = Zygote(child_env, workdir)
            _CURRENT[:] = [z]
        if z.why or z.signature != signature(child_env, workdir):
            return None
        return z


def close_all() -> None:
    """Stop this process's zygote (its runners are killed by their judge, not here)."""
    with _LOCK:
        for z in _CURRENT:
            z.close()
        _CURRENT.clear()


def _die_with_parent() -> None:  # the zygote's own preexec: it dies with its judge
    from solforge.bench.runner.confinement import _PR_SET_PDEATHSIG, _libc

    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# --- the zygote's side ---------------------------------------------------------------------


def unfit(own_dir: str) -> str:
    """Why this process must not fork runners ('' when it may): a second Python thread,
    a descriptor it did not open itself, or module state that kept a path of its own
    directory outside :data:`REPOINTED`."""
    if threading.active_count() > 1:
        return f"{threading.active_count()} Python threads after the imports"
    extra = [f for f in os.listdir("/proc/self/fd") if int(f) > 2] if os.path.isdir(
        "/proc/self/fd") else []
    if len(extra) > 2:  # its socket, and the directory listed just now
        return f"{len(extra) - 1} descriptors open besides its own after the imports"
    places = stray_paths(own_dir)
    if places:
        return f"module state kept the zygote's directory: {', '.join(places[:5])}"
    return ""


def stray_paths(own_dir: str) -> list[str]:
    """Where module state holds a path of ``own_dir`` (as given, or resolved: the
    working directory's spelling) that no child points at its own."""
    return [p for d in _spellings(own_dir) for p in kept_paths(d)
            if not p.startswith(REPOINTED) and not p.endswith(FOLLOWS_SYS_PATH)
            and not _config_default(p)]


def _spellings(path: str) -> list[str]:
    return list(dict.fromkeys((path, os.path.realpath(path))))


def _config_default(place: str) -> bool:
    """Whether ``place`` is the default of an entry of a torch config module (those
    ``_repoint`` rewrites)."""
    module, sep, rest = place.partition("._config.")
    return bool(sep) and rest.endswith(".default") and _is_config_module(
        sys.modules.get(module))


def _is_config_module(module: Any) -> bool:
    config = sys.modules.get("torch.utils._config_module")
    return config is not None and isinstance(module, config.ConfigModule)


def kept_paths(needle: str, depth: int = 5) -> list[str]:
    """Where the modules' state holds a string (or path) containing ``needle``: module
    globals and what they hold, ``depth`` levels down (containers, instances' own
    attributes, read without running any code of theirs: no lazy import is triggered)."""
    found: list[str] = []
    seen: set[int] = set()
    paths = (str, bytes, PurePath)
    containers = (list, tuple, set, frozenset, deque)

    def walk(obj: Any, where: str, left: int) -> None:
        kind = type(obj)
        if issubclass(kind, paths):
            text = obj if kind is str else os.fsdecode(obj)
            if needle in text:
                found.append(where)
            return
        if left <= 0 or id(obj) in seen or issubclass(kind, (types.ModuleType, type)):
            return
        seen.add(id(obj))
        if issubclass(kind, dict):
            for k, v in list(dict.items(obj)):
                walk(k, where, left - 1)
                walk(v, f"{where}.{k}" if type(k) is str else where, left - 1)
        elif issubclass(kind, containers):
            for v in list(obj):
                walk(v, where, left - 1)
        else:
            try:
                attrs = object.__getattribute__(obj, "__dict__")
            except Exception:  # noqa: BLE001 - no instance dictionary (or a refusing one)
                return
            if type(attrs) is dict:
                walk(attrs, where, left - 1)

    for name, module in list(sys.modules.items()):
        try:
            attrs = object.__getattribute__(module, "__dict__")
        except Exception:  # noqa: BLE001 - not a module-like object
            continue
        if type(attrs) is not dict:
            continue
        for k, v in list(dict.items(attrs)):
            if k.startswith("__") and k not in ("__path__", "__file__"):
                continue
            walk(v, f"{name}.{k}", depth)
    return found


def _repoint(workdir: str, old: str) -> None:
    """Point the :data:`REPOINTED` state of this (forked) child, which holds the zygote's
    directory ``old``, at the child's own ``workdir``."""
    import site
    import sysconfig

    pairs = list(zip(_spellings(old), _spellings(workdir), strict=False))
    for was, now in pairs:
        sys.path[:] = [now if p == was else p for p in sys.path]
        sys.path_importer_cache.pop(was, None)
    site.USER_BASE = None
    site.USER_SITE = None
    site.getusersitepackages()  # computed again from this child's HOME
    cfg = getattr(sysconfig, "_CONFIG_VARS", None)
    if isinstance(cfg, dict) and "userbase" in cfg:
        cfg["userbase"] = site.USER_BASE
    tempfile.tempdir = None
    linecache.clearcache()  # caches keyed by file paths (a relative name joins the cwd)
    inspect = sys.modules.get("inspect")
    if inspect is not None:
        inspect.modulesbyfile.clear()  # type: ignore[attr-defined]
        inspect._filesbymodname.clear()  # type: ignore[attr-defined]
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.ORIGINAL_DIR = os.getcwd()  # type: ignore[attr-defined]
    for module in list(sys.modules.values()):
        if _is_config_module(module):
            for entry in module._config.values():
                for was, now in pairs:
                    if isinstance(entry.default, str) and was in entry.default:
                        entry.default = entry.default.replace(was, now)
            if hasattr(module, "_is_dirty"):
                module._is_dirty = True
    package = sys.modules.get("torch._dynamo.package")
    cache = getattr(package, "DynamoCache", None)
    if cache is not None:
        package.DynamoCache = type(cache)(os.path.join(  # type: ignore[union-attr]
            package.cache_dir(), "dynamo"))  # type: ignore[union-attr]
    np = sys.modules.get("numpy")
    if np is not None:  # its global generator was seeded once, in the zygote
        np.random.seed()


def _child(req: dict[str, Any], chan: int, out: int, sock: socket.socket,
           own: str) -> NoReturn:
    """The forked runner, from the fork to :func:`process.run` (which never returns)."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        sock.detach()  # its descriptor is closed below; the object must not close another
        os.closerange(3, chan)
        os.closerange(chan + 1, 1 << 20)
        os.chdir(req["workdir"])
        os.environ.clear()
        os.environ.update(req["env"])
        from solforge.bench.runner.confinement import confine_child

        confine_child(req["config"], "cpu", req["view"], req["cgroup"], req["dropped"],
                      req["strip_caps"])
        _repoint(req["workdir"], own)
        from solforge.bench.runner import process

        sys.argv = [process.__file__, "--fd", str(chan), "--device", "cpu"]
        sys.orig_argv = [sys.executable, "-m", process.__name__, *sys.argv[1:]]
        process.run(chan, "cpu")
    except BaseException:  # noqa: BLE001 - said on its output, for the judge's message
        traceback.print_exc()
        sys.stderr.flush()
    os._exit(1)


def serve(sock: socket.socket, own: str) -> None:
    """Import what a runner imports, check this process (:func:`unfit`; ``own``: its
    private directory, its working directory, HOME and caches), then fork a runner per
    request until the judge hangs up."""
    from solforge.bench.runner.confinement import protect_judge

    protect_judge("cpu")  # non-dumpable like its judge: no runner reads its memory
    try:
        from solforge.bench.runner import process

        process.preload()
        why = unfit(own)
    except BaseException as e:  # noqa: BLE001 - reported: the judge execs its runners
        why = f"{type(e).__name__}: {e}"[:2000]
    sock.send(pickle.dumps({"ready": not why, "why": why}))
    os.chdir("/")
    shutil.rmtree(own, ignore_errors=True)
    if why:
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    statuses: dict[int, int] = {}
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        if sock in ready:
            msg, fds, flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
            if not msg:
                return  # the judge is gone; its runners die with this process
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 3:
                    raise ValueError("a malformed request")
                req = pickle.loads(msg)
                chan, out, status = fds
                sys.stdout.flush()
                pid = os.fork()
            except (OSError, ValueError, pickle.UnpicklingError) as e:
                for fd in fds:
                    os.close(fd)
                sock.send(pickle.dumps({"pid": None, "why": f"{type(e).__name__}: {e}"}))
                continue
            if pid == 0:
                os.close(wake_r)
                os.close(wake_w)
                os.close(status)
                _child(req, chan, out, sock, own)
            os.close(chan)
            os.close(out)
            statuses[pid] = status
            sock.send(pickle.dumps({"pid": pid}))
        _reap(statuses)


def _reap(statuses: dict[int, int]) -> None:
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = statuses.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, str(os.waitstatus_to_exitcode(status)).encode())
            except OSError:
                pass
            os.close(fd)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="solforge runner zygote (internal)")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args(argv)
    serve(socket.socket(fileno=a.fd), a.dir)
    os._exit(0)


if __name__ == "__main__":
    from solforge.bench.runner.zygote import main as _main

    _main()
