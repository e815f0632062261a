"""The judge: the trusted process that owns one device and decides every verdict.

It builds the reference, draws the inputs, runs the baselines, starts and talks to the
candidate runners, compares outputs and writes the evaluation record. It never imports a
candidate's code. One judge per device; the CLI (or a planner) talks to it through
:class:`solforge.bench.evaluator.Evaluator`.

A runner is started ahead of need (a "spare": Python, torch and the CUDA context already
up), so a candidate's evaluation does not wait for process start. Each runner serves
exactly one candidate and is then killed with all its descendants.

Requests (plain dicts over the judge's channel): ``evaluate`` and ``shutdown``. While it
works, the judge sends ``{"event": "phase", ...}`` messages so the caller can tell a broken
reference (judge died while building the reference) from anything else.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from solforge.bench.sandbox import RunnerProcess, SandboxConfig, become_subreaper


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

    def wait_ready(self, deadline: float) -> None:
        if not self.ready:
            msg = self._recv(deadline, "starting")
            if msg.get("op") != "ready":
                raise RunnerFailure("RUNTIME_ERROR", "the runner did not start")
            self.ready = True

    def ask(self, msg: dict[str, Any], deadline: float) -> dict[str, Any]:
        self.wait_ready(deadline)
        try:
            self.proc.channel.send(msg)
        except (OSError, BrokenPipeError) as e:
            raise self._died(f"while sending {msg.get('op')}: {e}") from None
        reply = self._recv(deadline, msg.get("op", "?"))
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
                    raise RunnerFailure("REWARD_HACK", f"the runner sent a forged message: {e}"
                                        ) from None
            if not self.proc.alive():
                raise self._died(f"during '{what}'")
            if self.memory_mb and self.proc.rss_mb() > self.memory_mb:
                self.proc.kill()
                raise RunnerFailure("RUNTIME_ERROR", f"host memory over {self.memory_mb} MiB "
                                    f"during '{what}'; the candidate was killed")

    def _died(self, when: str) -> RunnerFailure:
        time.sleep(0.05)
        how = self.proc.describe_exit()
        out = self.proc.output.text().strip()
        tail = out[-3000:] if out else "(no output)"
        return RunnerFailure("RUNTIME_ERROR", f"the candidate process {how} {when}.\n{tail}",
                             fatal=True)

    def close(self) -> None:
        if self.proc.alive():
            try:
                self.proc.channel.send({"op": "exit"})
            except Exception:
                pass
        self.proc.kill()


class Judge:
    def __init__(self, device: str, conn: Connection | None = None) -> None:
        import torch

        self.device = device
        self.conn = conn
        if device.startswith("cuda"):
            torch.cuda.init()
            torch.cuda.set_device(torch.device(device).index or 0)
        self.spares: dict[int, RunnerHandle] = {}

    def phase(self, name: str, **extra: Any) -> None:
        if self.conn is not None:
            self.conn.send({"event": "phase", "phase": name, **extra})

    def runner(self, memory_mb: int) -> RunnerHandle:
        """A fresh runner for one candidate: the spare if one is up, else a new one."""
        handle = self.spares.pop(memory_mb, None)
        if handle is None or not handle.proc.alive():
            handle = RunnerHandle(RunnerProcess(self.device,
                                                SandboxConfig(memory_mb=memory_mb)), memory_mb)
        return handle

    def replenish(self, memory_mb: int) -> None:
        """Start the next candidate's runner now, after timing is over: its start-up
        (Python, torch, CUDA context) must never overlap a measurement."""
        if memory_mb not in self.spares:
            self.spares[memory_mb] = RunnerHandle(
                RunnerProcess(self.device, SandboxConfig(memory_mb=memory_mb)), memory_mb)

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
        for h in self.spares.values():
            h.close()
        self.spares.clear()


def serve(conn: Connection, device: str) -> None:
    from solforge.bench.verdict import evaluate, profile

    become_subreaper()
    judge = Judge(device, conn)
    conn.send({"event": "ready", "pid": os.getpid()})
    try:
        while True:
            try:
                req = conn.recv()
            except EOFError:
                return
            if req.get("op") == "shutdown":
                conn.send({"event": "bye"})
                return
            try:
                if req.get("op") == "profile":
                    conn.send({"event": "result", "profile": profile(
                        judge, req["problem"], req["solution"], req.get("language"),
                        req["options"])})
                    continue
                record = evaluate(judge, req["problem"], req["solution"], req.get("language"),
                                  req["options"])
                judge.replenish(int(req["options"].get("memory_mb", 16384)))
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
    a = ap.parse_args(argv)
    conn = Connection(a.fd)
    serve(conn, a.device)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    # run under the module's real name, so its classes are the ones other modules import
    from solforge.bench.judge import main as _main

    _main()

__all__ = ["Judge", "RunnerHandle", "RunnerFailure", "serve"]
