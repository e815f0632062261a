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

After every evaluation the judge releases what it holds and measures what is left
(``memory.py``); a judge that stays above its idle floor answers the next request with
``{"event": "recycle"}`` and exits, and the caller sends that request to a new judge.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from solforge.bench.guard import FileGuard, describe
from solforge.bench.handle import RunnerFailure, RunnerHandle
from solforge.bench.options import EvalOptions
from solforge.bench.proctree import adopted_orphans, kill_tree, reap_all
from solforge.bench.sandbox import (
    RunnerProcess,
    SandboxConfig,
    become_subreaper,
    protect_judge,
)
from solforge.bench import slots
from solforge.bench.slots import SLOT_WAIT, held_slot_env


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
        self.current: tuple[str, dict[str, Any]] | None = None
        from solforge.bench.admission import DeviceLedger, capacity_mb
        from solforge.bench.memory import MemoryWatch

        # its idle floor is taken now, before any evaluation (memory.py)
        self.memory = MemoryWatch(device)
        # every judge on the machine admits its workloads through the device's ledger
        self.ledger = DeviceLedger(device, capacity_mb(device))
        # a wait for the device's slot is a phase of its own ("slot_wait"): other
        # evaluators' work, not this candidate's (the search budget leaves it out)
        slots.wait_hook = self._slot_wait

    def _slot_wait(self, waiting: bool) -> None:
        if waiting:
            self._send_phase(SLOT_WAIT, {})
        elif self.current is not None:  # back to the phase the wait interrupted
            self._send_phase(*self.current)

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
        self.current = (name, extra)
        self._send_phase(name, extra)

    def _send_phase(self, name: str, extra: dict[str, Any]) -> None:
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
            if judge.memory.unfit:
                # memory the last evaluation left behind that no release gave back: a new
                # judge takes this request (the caller starts it and sends it again)
                conn.send({"event": "recycle", "message": judge.memory.unfit})
                return
            judge.memory.begin()
            try:
                if req.get("op") == "profile":
                    prof = profile(judge, req["problem"], req["solution"], req.get("language"),
                                   req["options"])
                    checked = judge.after_evaluation({"message": prof.get("message", "")})
                    if judge.refused:
                        prof = {"ok": False, "message": checked["message"],
                                "flags": checked["flags"]}
                    conn.send({"event": "result", "profile": prof})
                    judge.memory.settle()
                    continue
                record = evaluate(judge, req["problem"], req["solution"], req.get("language"),
                                  req["options"])
                record = judge.after_evaluation(record)
                record["judge_memory"] = judge.memory.figures().model_dump()
                if not judge.refused:
                    judge.replenish(int(req["options"].get("memory_mb", DEFAULT_MEMORY_MB)))
                conn.send({"event": "result", "record": record})
                # after the reply: the release overlaps the caller's own work on the record
                judge.memory.settle()
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
