"""What one judge process holds between evaluations: its device, its runners (a spare
started ahead of need, a builder for ahead-of-time builds), its file guard, its memory
watch and the device's admission ledger, and the phase it is in.

The process around it (requests, replies, recycling) is ``process.py``; the order of one
evaluation is ``pipeline.py``.

Not covered: what a runner may do once started (``runner/sandbox.py``) and what the guard
hashes (``guard.py``).
"""


from __future__ import annotations

import os
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from solforge import env
from solforge.bench.judge import install
from solforge.bench.judge.admission import DeviceLedger, capacity_mb
from solforge.bench.judge.guard import FileGuard, describe
from solforge.bench.judge.memory import MemoryWatch
from solforge.bench.measure import slots
from solforge.bench.measure.slots import SLOT_WAIT, held_slot_env
from solforge.bench.runner import zygote
from solforge.bench.runner.handle import RunnerFailure, RunnerHandle
from solforge.bench.runner.proctree import adopted_orphans, kill_tree, reap_all
from solforge.bench.runner.sandbox import RunnerProcess, SandboxConfig, protect_judge
from solforge.records import EvalOptions


def _preload(device: str) -> None:
    """Import now everything the judge would otherwise import lazily during an evaluation,
    after candidate code has run: a module rewritten by a candidate must never load into
    the trusted process (the file guard then sees the change before anything runs it)."""
    import importlib

    # the modules an evaluation imports inside functions (the pipeline's own imports are
    # loaded with ``process.py``)
    for name in ("solforge.bench.judge.pipeline", "solforge.bench.policy.static",
                 "solforge.bench.judge.reference_solution", "solforge.sol.hooks",
                 "solforge.sol.work", "solforge.problems.loader", "solforge.problems.gen"):
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
            install.mark_tampered(changed)
            raise RunnerFailure("REWARD_HACK", self.refused, flag="evaluator_tampered")

    def after_evaluation(self, record: dict[str, Any]) -> dict[str, Any]:
        """Kill what a candidate left behind, then check the evaluator's files."""
        for pid in adopted_orphans():
            kill_tree(pid)
        reap_all()
        changed = self.guard.changed()
        if changed:
            self.refused = describe(changed)
            install.mark_tampered(changed)  # later commands refuse too (install.py)
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

    def runner(self, memory_mb: int, solution: Path | None = None) -> RunnerHandle:
        """A fresh runner for one candidate: the oldest live spare, else a new one; with
        ``solution``, holding that candidate's build caches (``runner/caches.py``)."""
        pool = self.spares.get(memory_mb, [])
        handle = None
        while pool and handle is None:
            h = pool.pop(0)
            if h.proc.alive():
                handle = h
            else:
                h.close()
        if handle is None:
            handle = RunnerHandle(RunnerProcess(self.device, SandboxConfig(
                memory_mb=memory_mb, extra_env=held_slot_env(self.device))), memory_mb)
        if solution is not None:
            handle.proc.assign(solution)
        return handle

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

    def builder(self, memory_mb: int, solution: Path) -> RunnerHandle:
        """A runner for ahead-of-time builds of ``solution``: CUDA hidden, the target
        architecture given, the candidate's build caches in it."""
        arch: dict[str, str] = {}
        if self.device.startswith("cuda"):
            import torch

            major, minor = torch.cuda.get_device_capability(torch.device(self.device))
            arch[env.CUDA_ARCH] = f"sm_{major}{minor}{'a' if major >= 9 else ''}"
            arch["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        else:
            arch["TORCH_CUDA_ARCH_LIST"] = "9.0"
        handle = RunnerHandle(RunnerProcess("cpu", SandboxConfig(memory_mb=memory_mb,
                                                                 extra_env=arch)), memory_mb)
        handle.proc.assign(solution)
        return handle

    def close(self) -> None:
        for pool in self.spares.values():
            for h in pool:
                h.close()
        self.spares.clear()
        zygote.close_all()
        reap_all()


DEFAULT_MEMORY_MB = EvalOptions.model_fields["memory_mb"].default
SPARES_ENV = env.SPARES


def spare_count(device: str) -> int:
    """How many runners a judge keeps started ahead of need (``SOLFORGE_SPARES`` overrides).

    Three on a GPU machine with at least 8 cores: back-to-back evaluations then find a
    runner started two evaluations earlier, instead of waiting for Python, torch and a CUDA
    context (seconds under load: benchmarks/results/FINDINGS.md, "spares"). One elsewhere, started after timing: on a CPU device,
    or with few cores, a starting process would compete with the candidate being timed.
    Each idle spare costs about 1 GB of host memory and a CUDA context.
    """
    given = env.spares()
    if given is not None:
        return given
    return 3 if device.startswith("cuda") and (os.cpu_count() or 1) >= 8 else 1


__all__ = ["DEFAULT_MEMORY_MB", "SPARES_ENV", "Judge", "spare_count"]
