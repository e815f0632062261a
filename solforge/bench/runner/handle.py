"""The judge's side of one runner: requests under a deadline, and the watchdogs.

:class:`RunnerHandle` sends a request to a runner (``bench/runner/process.py``) and waits for the
reply while watching the runner's process tree: host memory, the number of processes (a
fork bomb), the volume of output (a flood), and, when asked, the CPU it burns between
requests (background work). It can freeze the runner (SIGSTOP) while the judge times
baselines, and it kills the whole tree when done. It also keeps the runner's own time per
operation (``op_seconds``: the runner's clock, for diagnosis only).

Not covered: what the runner does inside one request; the judge checks the results.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

from solforge.bench.measure import slots
from solforge.bench.runner import quiet
from solforge.bench.runner.proctree import cpu_seconds
from solforge.bench.runner.sandbox import RunnerProcess

# How long closing a GPU runner waits for it to drop its tensors (``close``)
EXIT_WAIT_S = 1.0


class RunnerFailure(Exception):
    """The runner failed an operation; carries the status the record should get."""

    def __init__(self, status: str, message: str, fatal: bool = False,
                 flag: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.fatal = fatal
        self.flag = flag


class RunnerHandle:
    """Talks to one runner with a deadline and a host-memory watchdog."""

    def __init__(self, proc: RunnerProcess, memory_mb: int) -> None:
        self.proc = proc
        self.memory_mb = memory_mb
        self.ready = False
        self.op_seconds: dict[str, float] = {}  # the runner's own time per operation
        self.peak_mb: float | None = None  # the runner's device memory peak, as it says
        self.sent_at = self.replied_at = 0.0  # perf_counter around the last request
        self.watch_idle = False
        self.idle_cpu_s = 0.0
        self.idle_wall_s = 0.0
        self._idle_mark: tuple[float, float] | None = None
        # its filesystem view as the judge found it when it was ready ('' = read-only
        # but its own directories; else why not: RunnerProcess.containment)
        self.containment = ""
        if quiet.enabled():
            quiet.register(proc.device, proc.pid)

    def start_idle_watch(self) -> None:
        """From now on, count the CPU the runner burns between replies and requests."""
        self.watch_idle = True
        self.idle_cpu_s = self.idle_wall_s = 0.0
        self._open_idle_window()

    def idle_probe(self, seconds: float) -> tuple[float, float]:
        """Wait ``seconds`` with the runner idle, so a busy background thread shows; the
        probe's own (CPU, wall) seconds: a window in which the judge does nothing either,
        so a loaded machine takes less of a spinning thread's core than in the others."""
        self._close_idle_window()  # the windows so far, then the probe's own
        self._open_idle_window()
        cpu0, wall0 = self.idle_cpu_s, self.idle_wall_s
        time.sleep(seconds)
        self._close_idle_window()
        self._open_idle_window()
        return self.idle_cpu_s - cpu0, self.idle_wall_s - wall0

    def _open_idle_window(self) -> None:
        self._idle_mark = (time.monotonic(), cpu_seconds(self.proc.processes()))

    def _close_idle_window(self) -> None:
        if self.watch_idle and self._idle_mark is not None:
            t0, c0 = self._idle_mark
            self.idle_wall_s += time.monotonic() - t0
            self.idle_cpu_s += max(0.0, cpu_seconds(self.proc.processes()) - c0)
        self._idle_mark = None

    def wait_ready(self, deadline: float) -> None:
        if not self.ready:
            msg = self._recv(deadline, "starting")
            if msg.get("op") != "ready":
                raise RunnerFailure("RUNTIME_ERROR", "the runner did not start")
            self.ready = True
            # read from /proc before any request, so before any candidate code runs
            self.containment = self.proc.containment()

    def ask(self, msg: dict[str, Any], deadline: float) -> dict[str, Any]:
        self.wait_ready(deadline)
        self._close_idle_window()
        self.sent_at = time.perf_counter()
        try:
            self.proc.channel.send(msg)
        except (OSError, BrokenPipeError) as e:
            raise self._died(f"while sending {msg.get('op')}: {e}") from None
        reply = self._recv(deadline, msg.get("op", "?"))
        self.replied_at = time.perf_counter()
        op = str(msg.get("op", "?"))
        try:
            self.op_seconds[op] = self.op_seconds.get(op, 0.0) + float(reply.get("elapsed_s", 0))
        except (TypeError, ValueError):
            pass
        if self.proc.hit_process_limit():
            self._watchdog(msg.get("op", "?"))
        if self.watch_idle:
            self._open_idle_window()
        if isinstance(reply.get("peak_mb"), (int, float)):
            self.peak_mb = max(self.peak_mb or 0.0, float(reply["peak_mb"]))
        if self.proc.device.startswith("cuda") and _sent_cuda(msg):
            import torch

            # blocks the runner let go of are freed now, not at the next allocation miss
            torch.cuda.ipc_collect()
        if not reply.get("ok"):
            detail = reply.get("message", "")
            tb = reply.get("traceback")
            if tb:
                detail = f"{detail}\n{tb}"
            raise RunnerFailure(reply.get("status", "RUNTIME_ERROR"), detail,
                                bool(reply.get("fatal")), reply.get("flag"))
        return reply

    def _recv(self, deadline: float, what: str) -> dict[str, Any]:
        from solforge.bench.runner.channel import ChannelError

        while True:
            remaining = deadline - slots.clock()  # a wait for the slot is not the candidate's
            if remaining <= 0:
                self.proc.kill()
                raise RunnerFailure("TIMEOUT", f"no answer to '{what}' before the time limit;"
                                    " the candidate was killed")
            if self.proc.channel.poll(min(remaining, 0.25)):
                try:
                    return self.proc.channel.recv()
                except ChannelError as e:
                    if not self.proc.alive() or "hung up" in str(e):
                        raise self._died(f"during '{what}'") from None
                    self.proc.kill()
                    raise RunnerFailure("REWARD_HACK", f"the runner sent a forged message: {e}",
                                        flag="forged_message") from None
            if not self.proc.alive():
                self._watchdog(what)
                raise self._died(f"during '{what}'")
            self._watchdog(what)

    def _watchdog(self, what: str) -> None:
        """Kill the runner when it exceeds a limit: processes, output, host memory."""
        cfg = self.proc.config
        procs = self.proc.processes()
        if len(procs) - 1 > cfg.max_processes or self.proc.hit_process_limit():
            self.proc.kill()
            raise RunnerFailure("RUNTIME_ERROR", f"process limit: the candidate started more "
                                f"than {cfg.max_processes} processes (or {cfg.max_tasks} "
                                f"tasks) during '{what}', a fork bomb; it was killed with all "
                                "of them")
        if cfg.output_mb and self.proc.output.total > cfg.output_mb << 20:
            self.proc.kill()
            raise RunnerFailure("RUNTIME_ERROR", f"output flood: the candidate wrote more than "
                                f"{cfg.output_mb} MiB to stdout/stderr during '{what}'; it was "
                                f"killed.\n{self.proc.output.text()[-1500:]}")
        if self.memory_mb and self.proc.rss_mb(procs) > self.memory_mb:
            copies = _copies(self.proc.pid, procs)
            self.proc.kill()
            if copies >= 16:  # copies of the runner itself: forks, not compilers
                raise RunnerFailure("RUNTIME_ERROR", f"process limit: the candidate started "
                                    f"{len(procs) - 1} processes holding over "
                                    f"{self.memory_mb} MiB during '{what}', a fork bomb; it "
                                    "was killed with all of them")
            across = f" across {len(procs)} processes" if len(procs) > 1 else ""
            raise RunnerFailure("RUNTIME_ERROR", f"host memory exhausted: over "
                                f"{self.memory_mb} MiB resident{across} during '{what}'; the "
                                "candidate was killed")

    def _died(self, when: str) -> RunnerFailure:
        time.sleep(0.05)
        how = self.proc.describe_exit()
        out = self.proc.output.text().strip()
        tail = out[-3000:] if out else "(no output)"
        return RunnerFailure("RUNTIME_ERROR", f"the candidate process {how} {when}.\n{tail}",
                             fatal=True)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Stop every process of the runner (SIGSTOP) for the block: while the judge times
        baselines nothing of the candidate runs (no noisy neighbour, no file written
        under the judge's lazy imports). The runner is idle then; it resumes unchanged."""
        if quiet.enabled():  # first: another judge's quiet measurement must not continue it
            quiet.mark_frozen(self.proc.device, self.proc.pid, True)
        stopped = [p for p in self.proc.processes() if _signal(p, signal.SIGSTOP)]
        try:
            yield
        finally:
            if quiet.enabled():
                quiet.mark_frozen(self.proc.device, self.proc.pid, False)
            for p in stopped:
                _signal(p, signal.SIGCONT)
            # frozen time is not idle time: the window starts again now
            self._idle_mark = None
            if self.watch_idle:
                self._open_idle_window()

    def close(self) -> None:
        """Ask the runner to drop its tensors and exit, then kill its whole tree. On a GPU
        the judge waits for the answer (a second at most): until the runner has dropped
        its views of blocks the judge sent over CUDA IPC, the judge cannot free them
        (``bench/judge/memory.py``). A runner that does not answer is killed all the same; what it
        held then shows in the judge's idle level."""
        if quiet.enabled():
            quiet.unregister(self.proc.device, self.proc.pid)
        if self.proc.alive():
            try:
                self.proc.channel.send({"op": "exit"})
                if self.ready and self.proc.device.startswith("cuda"):
                    self.proc.channel.poll(EXIT_WAIT_S)
            except Exception:
                pass
        self.proc.kill()
        if self.proc.device.startswith("cuda"):
            import torch

            if torch.cuda.is_initialized():
                torch.cuda.ipc_collect()


def _sent_cuda(msg: Any) -> bool:
    """Whether a request carried CUDA tensors (sent over IPC, so the judge collects)."""
    if isinstance(msg, dict):
        return any(_sent_cuda(v) for v in msg.values())
    if isinstance(msg, (list, tuple)):
        return any(_sent_cuda(v) for v in msg)
    return getattr(msg, "is_cuda", False) is True


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _copies(runner: int, procs: list[int]) -> int:
    """How many of ``procs`` are forked copies of the ``runner`` process: the same
    command name and not exec'd into a compiler (a fork bomb's children; resident memory
    counts their shared pages once each, so the memory limit trips before the count)."""
    from pathlib import Path

    def comm(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split("(", 1)[1].rsplit(")", 1)[0]
        except (OSError, IndexError):
            return ""

    own = comm(runner)
    return sum(1 for p in procs if p != runner and own and comm(p) == own)
