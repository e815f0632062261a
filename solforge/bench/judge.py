"""The judge: the trusted process that owns one device and decides every verdict.

It builds the reference, draws the inputs, runs the baselines, starts and talks to the
candidate runners, compares outputs and writes the evaluation record. It never imports a
candidate's code. One judge per device; the CLI (or a planner) talks to it through
:class:`solforge.bench.evaluator.Evaluator`.

A runner is started ahead of need (a "spare": Python, torch and the CUDA context already
up), so a candidate's evaluation does not wait for process start. Each runner serves
exactly one candidate and is then killed with all its descendants (and any orphan of it
the judge adopted as subreaper).

While it waits for a runner the judge watches it: host memory, the number of processes
(a fork bomb), the volume of output (a flood), and, from the timing phase on, the CPU
the runner's processes burn *between* requests, when an honest runner is idle
(background work: a thread that finishes the call's work after it returned, or that
slows the baselines timed meanwhile). Compilers and compile workers are left out of
that count.

After every evaluation the judge compares its own files with the manifest it took at
start (``guard.py``); a change marks that evaluation ``evaluator_tampered`` and the judge
refuses every later request.

Requests (plain dicts over the judge's channel): ``evaluate`` and ``shutdown``. While it
works, the judge sends ``{"event": "phase", ...}`` messages so the caller can tell a broken
reference (judge died while building the reference) from anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from solforge.bench.guard import FileGuard, describe
from solforge.bench.options import EvalOptions
from solforge.bench.proctree import adopted_orphans, cpu_seconds, kill_tree, reap_all
from solforge.bench.slots import held_slot_env
from solforge.bench.sandbox import (
    RunnerProcess,
    SandboxConfig,
    become_subreaper,
    protect_judge,
)


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
        self.sent_at = self.replied_at = 0.0  # perf_counter around the last request
        self.watch_idle = False
        self.idle_cpu_s = 0.0
        self.idle_wall_s = 0.0
        self._idle_mark: tuple[float, float] | None = None

    def start_idle_watch(self) -> None:
        """From now on, count the CPU the runner burns between replies and requests."""
        self.watch_idle = True
        self.idle_cpu_s = self.idle_wall_s = 0.0
        self._idle_mark = (time.monotonic(), cpu_seconds(self.proc.processes()))

    def idle_probe(self, seconds: float) -> None:
        """Wait ``seconds`` with the runner idle, so a busy background thread shows."""
        time.sleep(seconds)
        self._close_idle_window()
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
            self._idle_mark = (time.monotonic(), cpu_seconds(self.proc.processes()))
        if not reply.get("ok"):
            detail = reply.get("message", "")
            tb = reply.get("traceback")
            if tb:
                detail = f"{detail}\n{tb}"
            raise RunnerFailure(reply.get("status", "RUNTIME_ERROR"), detail,
                                bool(reply.get("fatal")), reply.get("flag"))
        return reply

    def _recv(self, deadline: float, what: str) -> dict[str, Any]:
        from solforge.bench.channel import ChannelError

        while True:
            remaining = deadline - time.monotonic()
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
        stopped = [p for p in self.proc.processes() if _signal(p, signal.SIGSTOP)]
        try:
            yield
        finally:
            for p in stopped:
                _signal(p, signal.SIGCONT)
            self._idle_mark = None  # frozen time is not idle time

    def close(self) -> None:
        if self.proc.alive():
            try:
                self.proc.channel.send({"op": "exit"})
            except Exception:
                pass
        self.proc.kill()


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


def _preload(device: str) -> None:
    """Import now everything the judge would otherwise import lazily during an evaluation,
    after candidate code has run: a module rewritten by a candidate must never load into
    the trusted process (the file guard then sees the change before anything runs it)."""
    import importlib

    for name in ("solforge.bench.verdict", "solforge.bench.checks", "solforge.bench.probes",
                 "solforge.bench.policy", "solforge.bench.policy_static",
                 "solforge.bench.baselines", "solforge.bench.reference_solution",
                 "solforge.sol.hooks", "solforge.problems.loader", "solforge.problems.gen"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if device.startswith("cuda"):
        import torch.profiler  # noqa: F401


class Judge:
    def __init__(self, device: str, conn: Connection | None = None) -> None:
        import torch

        self.device = device
        self.conn = conn
        protect_judge(device)
        _preload(device)
        self.guard = FileGuard()
        self.refused: str | None = None
        if device.startswith("cuda"):
            torch.cuda.init()
            torch.cuda.set_device(torch.device(device).index or 0)
        self.spares: dict[int, list[RunnerHandle]] = {}

    def verify(self) -> None:
        """Stop the evaluation if the evaluator's files changed since the judge started."""
        changed = self.guard.changed()
        if changed:
            self.refused = describe(changed)
            raise RunnerFailure("REWARD_HACK", self.refused, flag="evaluator_tampered")

    def after_evaluation(self, record: dict[str, Any]) -> dict[str, Any]:
        """Kill what a candidate left behind, then check the evaluator's files."""
        for pid in adopted_orphans():
            kill_tree(pid)
        reap_all()
        changed = self.guard.changed()
        if changed:
            self.refused = describe(changed)
        if self.refused:
            record["status"] = "REWARD_HACK"
            flags = record.get("flags", [])
            record["flags"] = [*flags, *(["evaluator_tampered"] if "evaluator_tampered"
                                         not in flags else [])]
            if self.refused not in record.get("message", ""):
                record["message"] = (self.refused + "\n" + record.get("message", "")).strip()
        return record

    def phase(self, name: str, **extra: Any) -> None:
        if self.conn is not None:
            self.conn.send({"event": "phase", "phase": name, **extra})

    def runner(self, memory_mb: int) -> RunnerHandle:
        """A fresh runner for one candidate: the oldest live spare, else a new one."""
        pool = self.spares.get(memory_mb, [])
        while pool:
            handle = pool.pop(0)
            if handle.proc.alive():
                return handle
            handle.close()
        return RunnerHandle(RunnerProcess(self.device, SandboxConfig(
            memory_mb=memory_mb, extra_env=held_slot_env(self.device))), memory_mb)

    def replenish(self, memory_mb: int) -> None:
        """Top the spares up to :func:`spare_count`, after a candidate's timing is over.

        A spare's start-up has two stages. The CPU stage (Python, torch, the policy's
        imports) runs on the host's cores; with two spares on a GPU it overlaps the next
        candidate's evaluation, which is why two are kept only on machines with cores to
        spare. The GPU stage (CUDA context, CUPTI's first start) holds the device's slot
        (``runner.py``), so it never overlaps a measurement on the device.
        """
        pool = self.spares.setdefault(memory_mb, [])
        for dead in [h for h in pool if not h.proc.alive()]:
            pool.remove(dead)
            dead.close()
        while len(pool) < spare_count(self.device):
            pool.append(RunnerHandle(
                RunnerProcess(self.device, SandboxConfig(memory_mb=memory_mb)), memory_mb))

    def builder(self, memory_mb: int) -> RunnerHandle:
        """A runner for ahead-of-time builds: CUDA hidden, the target architecture given."""
        env = {}
        if self.device.startswith("cuda"):
            import torch

            major, minor = torch.cuda.get_device_capability(torch.device(self.device))
            env["SOLFORGE_CUDA_ARCH"] = f"sm_{major}{minor}{'a' if major >= 9 else ''}"
            env["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        else:
            env["TORCH_CUDA_ARCH_LIST"] = "9.0"
        return RunnerHandle(RunnerProcess("cpu", SandboxConfig(memory_mb=memory_mb,
                                                               extra_env=env)), memory_mb)

    def close(self) -> None:
        for pool in self.spares.values():
            for h in pool:
                h.close()
        self.spares.clear()
        reap_all()


DEFAULT_MEMORY_MB = EvalOptions.model_fields["memory_mb"].default
SPARES_ENV = "SOLFORGE_SPARES"


def spare_count(device: str) -> int:
    """How many runners a judge keeps started ahead of need (``SOLFORGE_SPARES`` overrides).

    Three on a GPU machine with at least 8 cores: back-to-back evaluations then find a
    runner started two evaluations earlier, instead of waiting for Python, torch and a CUDA
    context (4-7 s on the H200 machine under load; with two spares a warm evaluation of
    about 4 s still waited for one). One elsewhere, started after timing: on a CPU device,
    or with few cores, a starting process would compete with the candidate being timed.
    Each idle spare costs about 1 GB of host memory and a CUDA context.
    """
    value = os.environ.get(SPARES_ENV, "").strip()
    if value.isdigit():
        return int(value)
    return 3 if device.startswith("cuda") and (os.cpu_count() or 1) >= 8 else 1


def serve(conn: Connection, device: str, expected_digest: str | None = None) -> None:
    from solforge.bench.verdict import evaluate, profile

    become_subreaper()
    judge = Judge(device, conn)
    if expected_digest and judge.guard.digest() != expected_digest:
        judge.refused = ("the evaluator's files changed between the caller's start and this "
                         "judge's: no verdict can be trusted. Reinstall solforge and start "
                         "a new evaluator.")
    conn.send({"event": "ready", "pid": os.getpid(), "refused": judge.refused})
    if not judge.refused:  # the first candidate's runner starts now, not when it is needed
        judge.replenish(DEFAULT_MEMORY_MB)
    try:
        while True:
            try:
                req = conn.recv()
            except EOFError:
                return
            if req.get("op") == "shutdown":
                conn.send({"event": "bye"})
                return
            if judge.refused:
                conn.send({"event": "refused", "message": judge.refused})
                continue
            try:
                if req.get("op") == "profile":
                    prof = profile(judge, req["problem"], req["solution"], req.get("language"),
                                   req["options"])
                    checked = judge.after_evaluation({"message": prof.get("message", "")})
                    if judge.refused:
                        prof = {"ok": False, "message": checked["message"],
                                "flags": checked["flags"]}
                    conn.send({"event": "result", "profile": prof})
                    continue
                record = evaluate(judge, req["problem"], req["solution"], req.get("language"),
                                  req["options"])
                record = judge.after_evaluation(record)
                if not judge.refused:
                    judge.replenish(int(req["options"].get("memory_mb", DEFAULT_MEMORY_MB)))
                conn.send({"event": "result", "record": record})
            except Exception as e:  # a bug of ours: say so, keep serving
                conn.send({"event": "error", "message": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()})
    finally:
        judge.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="solforge judge (internal)")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--guard-digest", default=None)
    a = ap.parse_args(argv)
    conn = Connection(a.fd)
    serve(conn, a.device, a.guard_digest)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    # run under the module's real name, so its classes are the ones other modules import
    from solforge.bench.judge import main as _main

    _main()

__all__ = ["Judge", "RunnerFailure", "RunnerHandle", "serve"]
