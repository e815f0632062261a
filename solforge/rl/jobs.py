"""The reward server's work: jobs, one queue and one evaluator per device slot.

A :class:`Job` is one solution for one task. :class:`SlotPool` owns the slots: each is a
thread with its own queue and its own :class:`~solforge.bench.Evaluator` (one judge
process) on one device, wrapped in the run cache of ``orchestrate/evalcache.py`` (an
identical source, task and options gets the verdict already made, under that module's
rules). A new job goes to the queue of the least loaded slot, ties going to one that last
took its problem (its reference and baselines are warm there); a slot runs up to
``batch`` queued jobs of the problem it just ran before the oldest job, and a slot with an
empty queue takes the newest job queued behind a busy one (a hang must not hold up the
jobs queued behind it while another slot idles).

What a solution does cannot reach the pool: the evaluator returns a record whatever the
candidate does (crash, hang, flood, escape attempts; ``docs/EVALUATOR.md``). The one
exception is a candidate that changed the evaluator's own files: as ``solforge bench``
stops its suite, the pool stops (:attr:`SlotPool.stopped`), that job gets the hack reward,
every waiting job is failed with the reason, and the server refuses new work.

Not covered: persistence of queued jobs across a server restart (finished verdicts persist
in the cache; a trainer re-sends what it has no answer for), several machines.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import threading
import time
import traceback
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solforge.bench import Evaluator, EvaluatorTampered
from solforge.orchestrate.evalcache import CachedEvaluator
from solforge.orchestrate.ledger import Ledger
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.records.options import EvalOptions
from solforge.rl.feedback import visible_feedback
from solforge.rl.reward import Reward, RewardConfig, reward_of
from solforge.rl.task import Task

log = logging.getLogger("solforge.serve")


@dataclass
class Job:
    """One solution for one task, from queued to done."""

    task: Task
    source: str | None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    state: str = "queued"  # queued, running, done
    slot: int | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    reward: Reward | None = None
    feedback: str = ""
    cached: bool = False
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = field(
        default_factory=list, repr=False)

    def finish(self, reward: Reward, feedback: str) -> None:
        self.reward, self.feedback = reward, feedback
        self.state, self.finished = "done", time.time()
        self._done.set()
        for loop, fut in self._waiters:
            loop.call_soon_threadsafe(_resolve, fut)

    async def wait(self, timeout: float) -> bool:
        """Wait (without a thread) until done; False on timeout."""
        if self._done.is_set():
            return True
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._waiters.append((loop, fut))
        if self._done.is_set():  # finished between the check and the append
            return True
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return False
        return True

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "state": self.state, "task": self.task.model_dump(
            exclude_none=True), "slot": self.slot, "source_sha256": None if self.source is
            None else hashlib.sha256(self.source.encode()).hexdigest()}
        if self.reward is not None:
            out.update(reward=self.reward.value, result=self.reward.model_dump(),
                       feedback=self.feedback, cached=self.cached,
                       seconds=round((self.finished or 0) - (self.started or self.created), 3))
        return out


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(True)


class _Slot:
    def __init__(self, index: int, device: str) -> None:
        self.index, self.device = index, device
        self.queue: deque[Job] = deque()
        self.last_problem: str | None = None  # of the last job queued here
        self.last_run: str | None = None  # of the last job run here
        self.run_length = 0  # jobs of last_run run back to back
        self.busy = False
        self.thread: threading.Thread | None = None


class SlotPool:
    """Slots evaluating queued jobs (see module doc). ``options`` are the evaluations'
    (device aside: each slot has its own)."""

    def __init__(self, problems: dict[str, Problem], devices: list[str], options: EvalOptions,
                 reward: RewardConfig, state_dir: Path, batch: int = 8,
                 keep_done: int = 20000) -> None:
        if not devices:
            raise ValueError("a pool needs at least one device slot")
        self.problems, self.options, self.reward = problems, options, reward
        self.batch, self.keep_done = max(1, batch), keep_done
        self.state_dir = Path(state_dir)
        self.solutions = self.state_dir / "solutions"
        self.solutions.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(self.state_dir / "cache.sqlite")
        self.slots = [_Slot(i, d) for i, d in enumerate(devices)]
        self.jobs: dict[str, Job] = {}
        self.done_order: deque[str] = deque()
        self.lock = threading.Condition()
        self.stopped: str = ""
        self.closing = False
        self.counts: Counter[str] = Counter()
        self.eval_seconds = 0.0
        self.evaluations = 0
        self.cache_hits = 0
        self._ids = itertools.count()
        self.redact: list[str] = []  # secrets no feedback may carry (the server's token)

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        for s in self.slots:
            s.thread = threading.Thread(target=self._loop, args=(s,), daemon=True,
                                        name=f"solforge-slot-{s.index}")
            s.thread.start()

    def close(self) -> None:
        with self.lock:
            self.closing = True
            self.lock.notify_all()
        for s in self.slots:
            if s.thread is not None:
                s.thread.join(timeout=60)

    # -- submission -----------------------------------------------------------------------
    def submit(self, jobs: list[Job]) -> None:
        """Queue ``jobs`` (their tasks checked by the caller against :attr:`problems`)."""
        with self.lock:
            if self.stopped:
                raise RuntimeError(self.stopped)
            for job in jobs:
                slot = self._choose(job.task.problem)
                job.slot = slot.index
                slot.queue.append(job)
                slot.last_problem = job.task.problem
                self.jobs[job.id] = job
            self.lock.notify_all()

    def _choose(self, problem: str) -> _Slot:
        load = {s.index: len(s.queue) + s.busy for s in self.slots}
        # the least loaded slot; among those, one that last took this problem
        return min(self.slots, key=lambda s: (load[s.index], s.last_problem != problem,
                                              s.index))

    def get(self, job_id: str) -> Job | None:
        with self.lock:
            return self.jobs.get(job_id)

    def depth(self) -> dict[str, int]:
        with self.lock:
            return {"queued": sum(len(s.queue) for s in self.slots),
                    "running": sum(s.busy for s in self.slots)}

    # -- the slot's loop ------------------------------------------------------------------
    def _take(self, slot: _Slot) -> Job | None:
        """The slot's next job (None: the pool is closing)."""
        with self.lock:
            while not slot.queue and not self.closing:
                # an idle slot takes the newest job of the longest queue of a busy one
                victim = max((s for s in self.slots if s is not slot and s.busy),
                             key=lambda s: len(s.queue), default=None)
                if victim is not None and victim.queue:
                    stolen = victim.queue.pop()
                    stolen.slot = slot.index
                    slot.queue.append(stolen)
                    break
                self.lock.wait(timeout=1.0)
            if self.closing:
                return None
            job = slot.queue[0]
            if slot.run_length < self.batch:
                # the problem just run goes on while it has jobs here: it is warm
                job = next((j for j in slot.queue if j.task.problem == slot.last_run), job)
            slot.queue.remove(job)
            slot.run_length = slot.run_length + 1 if job.task.problem == slot.last_run else 1
            slot.last_run = job.task.problem
            slot.busy = True
            return job

    def _loop(self, slot: _Slot) -> None:
        opts = self.options.model_copy(update={"device": slot.device})
        with CachedEvaluator(Evaluator(opts), self.ledger) as ev:
            while True:
                job = self._take(slot)
                if job is None:
                    return
                self._run(ev, job)
                with self.lock:
                    slot.busy = False

    def _run(self, ev: CachedEvaluator, job: Job) -> None:
        job.state, job.started = "running", time.time()
        try:
            if self.stopped:
                record = _refused(job, self.stopped)
            elif job.source is None:
                record = _refused(job, "NO_SOLUTION: the completion has no ```python block "
                                  "defining ModelNew", status=Status.COMPILE_ERROR)
            else:
                record = self._evaluate(ev, job)
            reward = reward_of(record, self.reward)
            text = visible_feedback(record) if job.source is not None else record.message
        except Exception as e:  # a bug of ours must cost one job, never the slot
            reward = Reward(value=self.reward.fail or 0.0, stage="infra", valid=False,
                            status=Status.RUNTIME_ERROR.value,
                            reason=f"internal error: {type(e).__name__}: {e}")
            text = traceback.format_exc()[-1500:]
        # a solution may have read a secret from a file and raised it as its error
        for secret in self.redact:
            text = text.replace(secret, "<redacted>")
            reward.reason = reward.reason.replace(secret, "<redacted>")
        job.finish(reward, text)
        log.info("job %s slot %s %s: %s %s (%s)%s %.1fs", job.id, job.slot, job.task.problem,
                 reward.stage, reward.status, reward.reason[:200],
                 " cached" if job.cached else "", (job.finished or 0) - (job.started or 0))
        with self.lock:
            self.counts[reward.stage] += 1
            self._keep(job)

    def _evaluate(self, ev: CachedEvaluator, job: Job) -> EvaluationRecord:
        problem = self.problems[job.task.problem]
        path = self.solutions / f"{next(self._ids)}-{job.id}.py"
        path.write_text(job.source or "")
        hits = ev.hits
        t0 = time.monotonic()
        try:
            record = ev.evaluate(problem, path, workloads="all",
                                 languages=job.task.accepted())
        except EvaluatorTampered as e:
            self._stop(f"the evaluator stopped: a solution changed its files ({e})")
            record = EvaluationRecord(problem=problem.name, solution=str(path),
                                      status=Status.REWARD_HACK, flags=["evaluator_tampered"],
                                      message=str(e), policy=self.options.policy)
        finally:
            path.unlink(missing_ok=True)
        job.cached = ev.hits > hits
        with self.lock:
            if job.cached:
                self.cache_hits += 1
            else:
                self.evaluations += 1
                self.eval_seconds += time.monotonic() - t0
        if "evaluator_tampered" in record.flags:
            self._stop("the evaluator stopped: a solution changed its files "
                       f"({record.message[:300]})")
        return record

    def _stop(self, reason: str) -> None:
        with self.lock:
            if self.stopped:
                return
            self.stopped = reason
            waiting = [j for s in self.slots for j in s.queue]
            for s in self.slots:
                s.queue.clear()
        for j in waiting:
            j.state, j.started = "running", time.time()
            record = _refused(j, reason)
            j.finish(reward_of(record, self.reward), record.message)
            with self.lock:
                self._keep(j)

    def _keep(self, job: Job) -> None:
        # finished jobs stay readable (GET /tasks/{id}) until keep_done newer ones finished
        self.done_order.append(job.id)
        while len(self.done_order) > self.keep_done:
            self.jobs.pop(self.done_order.popleft(), None)


def _refused(job: Job, message: str, status: Status = Status.RUNTIME_ERROR) -> EvaluationRecord:
    # "the evaluator process" marks the record as the evaluator's failure (infra), except
    # for a missing solution, which is the policy's
    return EvaluationRecord(problem=job.task.problem, solution="", status=status,
                            message=message if status is Status.COMPILE_ERROR else
                            f"the evaluator process refused the job: {message}")
