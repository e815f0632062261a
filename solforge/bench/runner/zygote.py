"""The runner zygote: CPU runners forked from a process that imported torch once.

A runner's start-up is Python, torch and the compiler front end the policy trace needs:
about 3 CPU-seconds on the CI machine (torch 1.75, ``torch._dynamo`` 1.4), paid by every
candidate, most of a short CPU evaluation, and the largest cost of the CPU test suite
(benchmarks/results/FINDINGS.md, "The CPU suite in two processes"). The zygote pays it
once per judge: a child the judge starts with ``python -m`` (exec'd, so none of the
judge's memory is in it) in a runner's environment and a directory of its own, which runs
:func:`process.preload`, checks itself (:func:`unfit`) and then forks one runner per
request. The forked child takes every step an exec'd runner gets from
``sandbox.RunnerProcess`` (a new session, its private working directory and environment,
``confinement.confine_child``: cgroup, limits, namespaces, filesystem view, ``nobody`` or
no capabilities, no new privileges), re-points the module state that named the zygote's
directories (``forkstate.py``) and runs the same :func:`process.run`. No candidate code
ever runs in the zygote, so every runner is still a fresh process for one candidate: a
copy of one that has only imported modules.

The judge's requests cross a socket pair only the two hold; the zygote's answers (the
child's pid) come back as JSON, so the judge unpickles nothing from it. A child closes
every descriptor but its channel and its output before anything else. A child's exit
status comes back over a pipe of its own, as ``subprocess.Popen.poll`` would give it
(:class:`Forked`). The runner's descendants that outlive it are still the judge's (the
zygote is no subreaper: orphans go up to the judge, which is one,
``proctree.adopted_orphans``). The zygote is non-dumpable, as the judge is: a runner
without CAP_SYS_PTRACE reads neither its memory nor its descriptors. A runner that keeps
uid 0 (a hardened run where ``nobody`` cannot run Python) may signal it, as it may the
judge: killed, it takes its runners with it (the candidate's own among them) and the next
runner is exec'd while a new zygote starts (:data:`MAX_STARTS`); stopped, it is continued
before each request, and an answer later than :data:`ANSWER_S` gets its runner exec'd.

Checked when it starts, else it refuses and every runner is exec'd as before: one thread
(Python's, or a library's that a fork does not stop), CUDA not started, no descriptor but its own, and no module
state holding a path of its private directories (HOME, TMPDIR, the build caches) outside
the places each child points at its own (``forkstate.REPOINTED``): a forked runner would
otherwise write its caches into the zygote's. A runner with an environment of its own (a
builder's, or one started while its judge holds the CPU's slot) is exec'd, and so is one
whose environment differs from the zygote's in anything but those directories (a
variable the judge's process changed since). ``SOLFORGE_RUNNER_FORK=0`` turns the zygote
off.

Not covered: GPU runners (a CUDA context does not survive a fork; they start as spares,
ahead of need); what forked siblings share that exec'd runners would not: the string-hash
seed, the address-space layout (randomised once per zygote) and the pages of the imported
modules (copy-on-write, so a write stays in the writer). Seen from outside, a forked
runner's ``/proc/<pid>/cmdline`` and ``environ`` are the zygote's (a runner's allowlisted
environment naming the zygote's removed directory; the environment it runs with, and
hands to its own children, is its own).
"""

from __future__ import annotations

import argparse
import json
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
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from solforge import env
from solforge.bench.runner.forkstate import repoint, stray_paths
from solforge.bench.runner.proctree import MANAGED

# how many zygotes one process starts at most (one lost to a kill is replaced)
MAX_STARTS = 3
# longest a request waits for the zygote's answer, then the zygote is killed and the
# runner exec'd, so a stuck zygote cannot hold a candidate past its own deadline: before
# it is ready (its imports: about 3 CPU-seconds, minutes on a loaded machine), and after
# (a fork: milliseconds; a runner of the same uid may have stopped it, see ``spawn``)
START_S = 300.0
ANSWER_S = 30.0


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
        if self._popen is None:
            self.zygote.wake()  # its exit status comes from the zygote, which reaps it
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
        self.ready = False  # it said it serves

    def spawn(self, request: dict[str, Any], fds: tuple[int, int, int], stdout: Any,
              status_r: int, fallback: Callable[[], subprocess.Popen],
              settled: Callable[[], None]) -> Forked | None:
        """Ask for a runner (``fds``: its channel, output and exit-status descriptors);
        None, at once, when this zygote is gone."""
        with self.lock:
            if self.why:
                return None
            try:
                self.wake()
                socket.send_fds(self.sock, [pickle.dumps(request)], list(fds))
            except OSError as e:
                self._gone(f"the zygote's socket failed: {e}")
                return None
            f = Forked(self, stdout, status_r, fallback, settled)
            self.pending.append(f)
            return f

    def wake(self) -> None:
        """Continue it: a hardened runner keeps uid 0 and may have stopped it (SIGSTOP),
        as it may the judge. Before each request and each wait for a runner's exit; a
        stop after that costs :data:`ANSWER_S` at most."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def resolve(self, f: Forked) -> None:
        """Read replies until ``f`` has its pid, or the zygote refused or died."""
        with self.lock:
            while f._pid is None and not f._failed:
                try:
                    self.sock.settimeout(ANSWER_S if self.ready else START_S)
                    data = self.sock.recv(1 << 16)
                except TimeoutError:
                    self.proc.kill()
                    data = b""
                except OSError:
                    data = b""
                if not data:
                    self._gone(self.why or "the zygote exited")
                    break
                try:
                    msg = json.loads(data)  # plain data: the judge unpickles none of it
                except ValueError:
                    self.proc.kill()
                    self._gone("a malformed answer from the zygote")
                    break
                if "ready" in msg:
                    self.ready = bool(msg["ready"])
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
    """Why this process must not fork runners ('' when it may): a second thread (Python's,
    or a library's that a fork's handlers do not stop: only the forking thread survives a
    fork, with whatever lock another held), CUDA started (a context does not survive a
    fork; CPU runners hide the GPUs, so only a change of that would start it), a
    descriptor it did not open itself, or module state that kept a path of its own
    directory where no child re-points it (``forkstate.stray_paths``)."""
    if threading.active_count() > 1:
        return f"{threading.active_count()} Python threads after the imports"
    threads = _threads_past_a_fork()
    if threads > 1:
        return f"{threads} threads after the imports, a fork's handlers run"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised by the imports"
    extra = [f for f in os.listdir("/proc/self/fd") if int(f) > 2] if os.path.isdir(
        "/proc/self/fd") else []
    if len(extra) > 2:  # its socket, and the directory listed just now
        return f"{len(extra) - 1} descriptors open besides its own after the imports"
    places = stray_paths(own_dir)
    if places:
        return f"module state kept the zygote's directory: {', '.join(places[:5])}"
    return ""


def _threads_past_a_fork() -> int:
    """This process's threads once a fork's prepare handlers have run (a trial fork): a
    library that knows about forks stops its threads there and starts them again on its
    next call (OpenBLAS, loaded by NumPy with torch, keeps an idle thread server: one
    thread after ``import torch`` here, none after a fork); one that does not would be
    missing in the child."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1


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
        repoint(req["workdir"], own)
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
    if not why:  # Python's documented pattern for fork without exec: freeze, then fork
        process.freeze_imports()
    sock.send(json.dumps({"ready": not why, "why": why}).encode())
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
                sock.send(json.dumps({"pid": None, "why": f"{type(e).__name__}: {e}"}).encode())
                continue
            if pid == 0:
                os.close(wake_r)
                os.close(wake_w)
                os.close(status)
                _child(req, chan, out, sock, own)
            os.close(chan)
            os.close(out)
            statuses[pid] = status
            sock.send(json.dumps({"pid": pid}).encode())
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
