"""The Ray backend: one judge actor per GPU of a cluster, evaluations as calls to it.

``solforge optimize ... --backend ray [--address ADDR]`` runs the planner on the driver
(this process) and its judges in Ray actors:

- **One actor per device.** A device ``cuda:i`` of the planner is the i-th
  :class:`JudgeActor`, started with ``num_gpus=1`` wherever Ray finds a free GPU (Ray sets
  the actor's ``CUDA_VISIBLE_DEVICES``, so inside it the GPU is ``cuda:0``); ``cpu`` is one
  actor with one CPU. Every worker whose device it is gets its own judge *process* inside
  that actor (the actor runs calls concurrently), exactly as workers sharing a GPU do on
  one machine: the device's slot serialises their timing and the memory admission
  (``bench/judge/admission.py``) admits their workloads, both through files on the node
  that holds the GPU, keyed by the physical GPU. Since every judge of a GPU is in that
  GPU's actor, admission holds per GPU across the cluster.
- **What travels.** Each call carries the problem's and the solution's sources, which the
  actor (``judge_actor.py``) writes and evaluates where it runs; nothing assumes a shared
  filesystem. The record comes back as JSON, with the driver's solution path and device
  name put back in it.
- **What the driver keeps.** The ledger, the cache of verdicts, the run directory and
  every worker (search, LLM) as a thread: only the driver writes the ledger, and only
  after a call returned, so a call that is lost leaves nothing behind.
- **Faults.** An actor (or its node) lost during a call: the actor is replaced (a new one,
  placed by Ray on any node with a free GPU; when none is free within ``place_s``, the
  device's workers share another device's actor) and that evaluation is sent to it once
  more; the record's ``judge_fault`` says so. Lost a second time, the evaluation's record is a
  runtime error naming both losses, charged to nobody's verdict cache (its message names
  the evaluator). A lost actor's judge processes are killed by its orphan guard, and a
  judge process that dies inside a live actor is handled there (``judge_actor.py``).

Not covered: solforge itself does not travel: every node needs the same solforge (and
torch, Triton, ...) installed, as the judge checks its own files there; problems that
import files beside them and phase messages while an evaluation runs (``judge_actor.py``;
the search worker's phase clock adds a remote evaluation's phase times when its record
comes back); the driver's own death (``--resume``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
)

from solforge.bench import EvaluatorTampered
from solforge.orchestrate.judge_actor import MARK, JudgeActor
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.records.options import EvalOptions

__all__ = ["CONCURRENCY", "LOST", "MARK", "JudgeActor", "JudgeSlot", "RayBackend",
           "RayEvaluator"]

# an actor lost this way, or its node: the evaluation goes to a new actor once more
LOST = (RayActorError, ActorDiedError, ActorUnavailableError)
# calls one judge actor runs at once: one per worker sharing its device, and their closes
CONCURRENCY = 64


class JudgeSlot:
    """The driver's hold on one device's judge actor; replaces it when it is lost."""

    def __init__(self, backend: RayBackend, device: str) -> None:
        self.backend, self.device = backend, device
        self.lock = threading.Lock()
        self.generation = 0
        self.replaced = 0
        self.in_flight = 0
        self.actor = self._start()

    def _start(self) -> Any:
        gpu = self.device.startswith("cuda")
        cls = ray.remote(JudgeActor).options(
            num_gpus=1 if gpu else 0, num_cpus=0 if gpu else 1,
            max_concurrency=CONCURRENCY, max_restarts=0,
            runtime_env=self.backend.runtime_env or None)
        return cls.remote("cuda:0" if gpu else self.device)

    def count(self, delta: int) -> None:
        with self.lock:
            self.in_flight += delta

    def current(self) -> tuple[Any, int]:
        with self.lock:
            return self.actor, self.generation

    def replace(self, generation: int) -> None:
        """A new actor for the device, unless another caller replaced the lost one
        already (``generation`` is the one the caller saw fail)."""
        with self.lock:
            if generation != self.generation:
                return
            try:
                ray.kill(self.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - it is gone already
                pass
            self.actor = self._placed() or self.backend.borrow(self) or self._start()
            self.generation += 1
            self.replaced += 1

    def _placed(self) -> Any:
        """A new actor for the device once Ray placed it, or None when it could not within
        ``backend.place_s`` (its node is gone and every other GPU is taken)."""
        actor = self._start()
        try:
            ray.get(actor.where.remote(), timeout=self.backend.place_s)
            return actor
        except (GetTimeoutError, *LOST):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
            return None

    def alive(self) -> bool:
        try:
            ray.get(self.current()[0].where.remote(), timeout=30)
            return True
        except Exception:  # noqa: BLE001 - lost, or not answering: not one to share
            return False

    def kill(self) -> None:
        """Kill the actor as a lost node would (a test's fault; the next call replaces
        it)."""
        actor, _ = self.current()
        ray.kill(actor, no_restart=True)

    def close(self) -> None:
        actor, _ = self.current()
        try:
            ray.get(actor.shutdown.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - a lost actor holds nothing any more
            pass
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001
            pass


class RayEvaluator:
    """A caller-side handle on its judge in a device's actor, with the
    :class:`~solforge.bench.evaluator.Evaluator`'s methods."""

    def __init__(self, slot: JudgeSlot, options: EvalOptions, caller: str) -> None:
        self.slot, self.options, self.caller = slot, options, caller
        self.tampered: str | None = None
        # the search worker's phase clock (budget.PhaseClock) sets this; a remote judge's
        # phases are reported with its record, as one message of seconds
        self.on_phase: Any = None

    def _call(self, op: str, problem: Problem | str | Path, solution: str | Path,
              language: str | None, overrides: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The actor's answer and the fault ('' when none) that made it run twice; a
        ``{"lost": ...}`` answer when both actors were lost."""
        if self.tampered:
            raise EvaluatorTampered(self.tampered)
        path = Path(problem.path if isinstance(problem, Problem) else problem)
        sol = Path(solution)
        call = {"options": self.options.model_dump(mode="json"), "language": language,
                "overrides": overrides, "problem_file": path.name,
                "problem_source": path.read_text(), "solution_file": sol.name,
                "solution_source": sol.read_text()}
        fault = ""
        for _ in range(2):
            actor, generation = self.slot.current()
            self.slot.count(+1)
            try:
                answer = ray.get(getattr(actor, "call").remote(op, self.caller, call))
            except LOST as e:
                why = (f"the judge actor for {self.slot.device} was lost during the "
                       f"evaluation ({type(e).__name__}: {str(e)[:300]})")
                self.slot.replace(generation)
                if fault:
                    return {"lost": f"{fault}; {why}, again"}, fault
                fault = f"{why}; a new actor ran the evaluation again"
                continue
            finally:
                self.slot.count(-1)
            if "tampered" in answer:
                self.tampered = answer["tampered"]
                raise EvaluatorTampered(self.tampered)
            return answer, fault
        raise AssertionError("unreachable")

    def evaluate(self, problem: Problem | str | Path, solution: str | Path,
                 language: str | None = None, **overrides: Any) -> EvaluationRecord:
        answer, fault = self._call("evaluate", problem, solution, language, overrides)
        opts = self.options.model_copy(update=overrides) if overrides else self.options
        if "lost" in answer:
            name = problem.name if isinstance(problem, Problem) else Path(problem).stem
            record = EvaluationRecord(problem=name, solution=str(solution),
                                      device=opts.device, status=Status.RUNTIME_ERROR,
                                      message=f"the evaluator process was lost twice: "
                                              f"{answer['lost']}", policy=opts.policy)
            record.judge_fault = fault
            return record
        record = EvaluationRecord.from_json(answer["record"])
        record.solution, record.device = str(solution), opts.device
        if fault:
            record.judge_fault = "; ".join(x for x in (fault, record.judge_fault) if x)
        if self.on_phase is not None and record.phase_seconds:
            self.on_phase({"event": "phases", "seconds": dict(record.phase_seconds)})
        return record

    def profile(self, problem: Problem | str | Path, solution: str | Path,
                language: str | None = None, **overrides: Any) -> dict[str, Any]:
        answer, _ = self._call("profile", problem, solution, language, overrides)
        if "lost" in answer:
            return {"ok": False, "message": f"the evaluator process was lost twice: "
                                            f"{answer['lost']}"}
        return answer["profile"]

    def close(self) -> None:
        actor, _ = self.slot.current()
        try:
            ray.get(actor.close.remote(self.caller), timeout=60)
        except Exception:  # noqa: BLE001 - a lost actor holds no judge of ours
            pass

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RayBackend:
    """Judges as Ray actors, one per device; the planner's evaluators are handles on them.

    ``address`` None starts a Ray instance here (``num_cpus``, no dashboard), else joins
    the cluster at ``address`` (``auto`` for the one this node belongs to)."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 place_s: float = 120.0) -> None:
        import solforge

        self.place_s = place_s  # how long a lost actor's replacement may take to be placed
        # the judges import the solforge this driver runs (a checkout on PYTHONPATH
        # included); on other nodes that path is absent and their own install is used
        root = str(Path(solforge.__file__).resolve().parents[1])
        self.runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH")) if p)}}
        self.started = not ray.is_initialized()
        if self.started:
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            elif num_cpus is not None:
                kwargs["num_cpus"] = num_cpus
            ray.init(**kwargs)
        self.slots: dict[str, JudgeSlot] = {}
        self.lock = threading.Lock()

    def gpus(self) -> int:
        """GPUs in the cluster now."""
        return int(ray.cluster_resources().get("GPU", 0))

    def devices(self, requested: list[str]) -> list[str]:
        """``cuda:0`` .. ``cuda:N-1`` for the cluster's N GPUs when the run is on CUDA
        (``--gpus`` picks among them by index), else what was asked."""
        if not any(d.startswith("cuda") for d in requested):
            return list(requested)
        n = self.gpus()
        if n == 0:
            raise ValueError("--backend ray with --device cuda: the Ray cluster has no GPU "
                             "(start its nodes with `ray start` on machines with GPUs)")
        asked = [d for d in requested if d.startswith("cuda")]
        if len(asked) > 1 or asked != ["cuda"]:
            idx = [int(d.split(":")[1]) if ":" in d else 0 for d in asked]
            bad = [i for i in idx if i >= n]
            if bad:
                raise ValueError(f"--gpus {','.join(map(str, bad))}: the Ray cluster has "
                                 f"{n} GPU(s), indices 0..{n - 1}")
            return [f"cuda:{i}" for i in dict.fromkeys(idx)]
        return [f"cuda:{i}" for i in range(n)]

    def slot(self, device: str) -> JudgeSlot:
        with self.lock:
            if device not in self.slots:
                self.slots[device] = JudgeSlot(self, device)
            return self.slots[device]

    def borrow(self, lost: JudgeSlot) -> Any:
        """The actor of another live device of the same kind, for a device whose actor
        cannot be placed again (its node is gone): its workers' judges then share that GPU
        (its slot and its admission hold them as any workers sharing a GPU), and the run
        goes on. None when there is no such device."""
        gpu = lost.device.startswith("cuda")
        for s in list(self.slots.values()):
            if s is not lost and s.device.startswith("cuda") == gpu and s.alive():
                return s.current()[0]
        return None

    def evaluator(self, options: EvalOptions, caller: str) -> RayEvaluator:
        return RayEvaluator(self.slot(options.device), options, caller)

    def where(self) -> dict[str, dict[str, Any]]:
        """Where each device's actor runs (host, GPUs): for the run's log."""
        return {d: ray.get(s.current()[0].where.remote(), timeout=120)
                for d, s in list(self.slots.items())}

    def close(self) -> None:
        for s in list(self.slots.values()):
            s.close()
        self.slots.clear()
        if self.started:
            ray.shutdown()
