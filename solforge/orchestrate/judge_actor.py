"""The body of a Ray judge actor: the node side of ``ray_backend.py``.

A :class:`JudgeActor` runs on the node Ray placed it on and holds one
:class:`~solforge.bench.evaluator.Evaluator` (a judge process) per caller, for its one
device. Each call carries the problem file's source and the solution file's source (and
their file names); the actor writes them under its own temporary directory and evaluates
them there. Nothing assumes a shared filesystem. The record goes back as JSON. A judge
process that dies inside a live actor is handled there, by its Evaluator, as on one
machine. The actor's judge processes (sessions of their own) carry its mark in their
environment; its orphan guard, a process beside it that outlives it by a moment, kills
them once the actor is gone.

Not covered: placing, replacing and sharing actors, and retrying a call whose actor was
lost (the driver's side, ``ray_backend.py``); problems that import files beside them (only
the problem file is sent); phase messages while an evaluation runs (its phase times come
back with its record).
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import ray

from solforge import env
from solforge.bench import EvaluatorTampered
from solforge.records.options import EvalOptions

# the actor's mark in its judges' environment: what its orphan guard looks for
MARK = env.RAY_ACTOR

# The orphan guard: a process beside each judge actor that, once the actor is gone (killed
# by Ray, crashed), kills every process carrying the actor's mark: its judge processes run
# in sessions of their own and would otherwise finish their evaluation on the GPU beside
# the actor that replaced it.
_GUARD = """
import os, sys, time
parent, mark = int(sys.argv[1]), sys.argv[2].encode()
while os.path.exists(f"/proc/{parent}") and b"zombie" not in open(
        f"/proc/{parent}/status", "rb").read().lower():
    time.sleep(0.5)
from solforge.bench.runner.proctree import kill_tree
for d in os.listdir("/proc"):
    if d.isdigit() and int(d) != os.getpid():
        try:
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\\0")
        except OSError:
            continue
        if mark in env:
            kill_tree(int(d))
"""


class JudgeActor:
    """The body of a judge actor: one :class:`Evaluator` (judge process) per caller, on
    this node's device, fed with files written from the call's sources."""

    def __init__(self, device: str) -> None:
        import subprocess
        import sys
        import uuid

        self.device = device
        self.root = Path(tempfile.mkdtemp(prefix="solforge-judge-"))
        self.evaluators: dict[str, Any] = {}
        self.lock = threading.Lock()
        tag = uuid.uuid4().hex
        os.environ[MARK] = tag  # this process is the actor's alone: its judges inherit it
        self.guard = subprocess.Popen(
            [sys.executable, "-c", _GUARD, str(os.getpid()), f"{MARK}={tag}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)

    def where(self) -> dict[str, Any]:
        """Where this actor runs: host, pid, GPUs Ray gave it, the solforge it imports."""
        import solforge

        return {"host": socket.gethostname(), "pid": os.getpid(), "device": self.device,
                "gpus": [str(g) for g in ray.get_gpu_ids()],
                "judges": [ev.proc.pid for ev in list(self.evaluators.values())
                           if ev.proc is not None],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                "solforge": str(Path(solforge.__file__).parent)}

    def _evaluator(self, caller: str, options: dict[str, Any]) -> Any:
        from solforge.bench import Evaluator

        opts = EvalOptions.model_validate({**options, "device": self.device})
        with self.lock:
            ev = self.evaluators.get(caller)
            if ev is None or ev.options != opts:
                if ev is not None:
                    ev.close()
                ev = self.evaluators[caller] = Evaluator(opts)
            return ev

    def _write(self, kind: str, name: str, source: str) -> Path:
        import hashlib

        digest = hashlib.sha256(source.encode()).hexdigest()[:16]
        path = self.root / kind / digest / Path(name).name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(path.suffix + f".{threading.get_ident()}.tmp")
            tmp.write_text(source)
            tmp.replace(path)
        return path

    def call(self, op: str, caller: str, call: dict[str, Any]) -> dict[str, Any]:
        """``op`` (evaluate or profile) of the call's solution on the call's problem;
        ``{"record": ...}`` / ``{"profile": ...}``, or ``{"tampered": message}``."""
        ev = self._evaluator(caller, call["options"])
        problem = self._write("problems", call["problem_file"], call["problem_source"])
        solution = self._write("solutions", call["solution_file"], call["solution_source"])
        try:
            if op == "profile":
                return {"profile": ev.profile(problem, solution, call["language"],
                                              **call["overrides"])}
            record = ev.evaluate(problem, solution, call["language"], **call["overrides"])
        except EvaluatorTampered as e:
            return {"tampered": str(e)}
        return {"record": record.to_json()}

    def close(self, caller: str) -> None:
        """Close the caller's judge process (unblocks its evaluation under way)."""
        with self.lock:
            ev = self.evaluators.get(caller)
        if ev is not None:
            ev.close()

    def shutdown(self) -> None:
        with self.lock:
            evs, self.evaluators = list(self.evaluators.values()), {}
        for ev in evs:
            ev.close()

