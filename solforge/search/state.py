"""One problem's search as the ledger sees it (:class:`SearchState`): its attempts, its
visible and final evaluations, what a resumed search finds of an earlier one, and the
out-of-memory retry. The search's order and budgets are ``agent.py``'s.

Not covered: several searches of one problem at once (each keeps its own view of the
ledger's attempts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from solforge.bench import Evaluator
from solforge.bench.judge.build import judge_of, made_by_this_judge
from solforge.orchestrate.run import Run
from solforge.orchestrate.verify import reverified, reverify_overrides
from solforge.problems.spec import Problem
from solforge.records import speedup_vs_best
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.search.candidates import Candidate
from solforge.search.config import SearchConfig

# how the runner names a CUDA out-of-memory error (``bench.runner.explain``)
OUT_OF_GPU_MEMORY = "GPU out of memory"


def _score(record: EvaluationRecord, compile_outside: Mapping[str, str] | None = None
           ) -> float:
    """A record's rank in the search: -1 when it failed, else its speedup against the best
    baseline, with the compile figure left out on the workloads of ``compile_outside``
    (``SearchState.compile_failed``) whenever the record was measured."""
    if not record.passed:
        return -1.0
    data = record.to_json()
    for w in data.get("workloads", []) if compile_outside else []:
        if w.get("name") in compile_outside:
            w["compile_within_tolerance"] = False
    return speedup_vs_best(data) or 0.0


class SearchState:
    """One problem's search: the ledger writes and the bookkeeping between them."""

    def __init__(self, run: Run, problem: Problem, evaluator: Evaluator, config: SearchConfig,
                 on_event: Callable[..., None] | None,
                 stop: Callable[[], str] | None = None) -> None:
        self.run, self.problem, self.evaluator, self.config = run, problem, evaluator, config
        self.stop = stop or (lambda: "")
        self.led, self.name, self.worker = run.ledger, problem.name, config.worker
        self.on_event = on_event or (lambda kind, **data: None)
        self.cut_short = ""  # why the exploration ended early (the run stopping)
        # candidates evaluated whatever the budgets and the stop say (``baseline_first``)
        self.owed: set[str] = set()
        # the budgets' share by the reference's gap to speed of light (``gap_scale``)
        self.scale = 1.0
        # the longest charged seconds of an evaluated candidate that compiles in a plain
        # mode (``Candidate.compile_s``): what the next such compile is estimated by
        self.compile_seen: float | None = None
        # workloads where the compile baseline's own program failed the correctness
        # trials as a candidate (``compile_failed``): passed to every later evaluation
        self.compile_outside: dict[str, str] = {}
        self.attempts: dict[str, int] = {}           # candidate name -> attempt id
        self.visible: dict[str, EvaluationRecord] = {}
        # attempts of any search worker on this problem (the planner names later units
        # search-2, ...): the same source is the same attempt, judged once
        self.known: dict[str, dict[str, Any]] = {}
        # (attempt, kind) whose stored record an older judge made (``earlier``)
        self.rejudged: set[tuple[int, str]] = set()
        if config.resume:
            for a in self.led.attempts(self.name):
                if a["agent"] == "search":
                    self.known.setdefault(a["source_hash"], a)

    def saw_compile(self, c: Candidate, record: EvaluationRecord, charged: float) -> None:
        """Keep what a compile took on this problem (``compile_seen``): the charged seconds
        of a candidate that compiles in a plain mode and passed (one that failed may have
        stopped before its compile ended), and the reference's ``baseline`` phase, which
        warms up torch.compile's baseline of the reference."""
        took = []
        # a compile that tunes (coordinate descent, max-autotune) takes its tuning on top:
        # not what a plain compile takes
        if c.compile_s > 0 and record.passed and "autotune" not in c.levers:
            took.append(charged)
        if c.family == "reference" and record.speedup_vs_compile is not None:
            took.append(record.phase_seconds.get("baseline", 0.0))
        took = [t for t in took if t > 0]
        if took:
            self.compile_seen = max(self.compile_seen or 0.0, *took)

    def event(self, kind: str, **data: Any) -> None:
        self.led.event(kind, problem=self.name, worker=self.worker, **data)
        self.on_event(kind, problem=self.name, **data)

    def known_attempt(self, c: Candidate) -> int | None:
        """An earlier search attempt with the same source (resume), if any."""
        found = self.known.get(hashlib.sha256(c.source.encode()).hexdigest()[:16])
        return int(found["id"]) if found is not None else None

    def attempt(self, c: Candidate) -> int:
        known = self.known_attempt(c)
        if known is not None:
            return known
        attempt = self.led.add_attempt(
            self.name, c.source, c.language, agent="search", role=self.config.role,
            worker=self.worker, parent=self.attempts.get(c.parent or ""),
            reasoning=c.reasoning, levers=c.levers, path=f"candidate:{c.name}")
        self.run.solution_path(self.name, attempt).write_text(c.source)
        return attempt

    def compile_failed(self, record: EvaluationRecord) -> None:
        """The compile baseline's own program (the ``compile`` candidate) failed its
        correctness trials on these workloads: no later evaluation of this problem holds a
        candidate to its time there (``EvalOptions.compile_failed``; the record keeps the
        figure and says why). KernelBench's ``29_SwinMLP`` on an H100 kept 0.744x of a
        compile figure whose program failed a candidate's third trial
        (benchmarks/results/2026-12-07-h100-s29)."""
        failed = {w.name: w.message[:300] for w in record.workloads
                  if w.status is Status.INCORRECT_NUMERICAL}
        if failed and not failed.items() <= self.compile_outside.items():
            self.compile_outside.update(failed)
            self.event("baseline_outside_tolerance", baseline="compile",
                       workloads=sorted(failed))

    def score(self, record: EvaluationRecord) -> float:
        """The record's rank (``_score``) against the best baseline as known now: a record
        measured before the compile candidate failed its trials still held candidates to
        the compile figure. KernelBench's ``93_masked_cumsum`` on an H100 (session 30):
        the reference, surveyed at 0.39x of a compile figure whose program then failed,
        ranked below CUDA graphs at 0.58x of eager, and the run kept the graphs."""
        return _score(record, self.compile_outside)

    def _evaluate(self, path: Any, itself: str, overrides: dict[str, Any]
                  ) -> EvaluationRecord:
        if self.compile_outside:
            overrides = {**overrides, "compile_failed": dict(self.compile_outside)}
        record = self.evaluator.evaluate(self.problem, path, **overrides)
        if itself and record.passed:
            record.baseline_itself = itself
        return record

    def earlier(self, attempt: int, kind: str) -> EvaluationRecord | None:
        """The attempt's latest ``kind`` record of this run (on resume), if this judge's
        code made it (``judge/build.py``): a record of an older judge is judged again,
        once (``rejudged`` event), since the fault it may carry was fixed since."""
        if not self.config.resume:
            return None
        for e in reversed(self.led.evaluations(self.name, kind=kind)):
            # a record of a tampered evaluator says nothing about the candidate
            if e["attempt"] != attempt or \
                    "evaluator_tampered" in e["record"].get("flags", []):
                continue
            if not made_by_this_judge(e["record"]):
                if (attempt, kind) not in self.rejudged:
                    self.rejudged.add((attempt, kind))
                    self.event("rejudged", attempt=attempt, scope=kind,
                               judge=judge_of(e["record"]))
                return None
            return EvaluationRecord.from_json(e["record"])
        return None

    def verdict(self, attempt: int, itself: str = "") -> EvaluationRecord:
        """The attempt's ``final`` evaluation (all workloads, a fresh runner, ``rounds``
        interleaved rounds with fresh baselines, the evaluator's own timing budget, at
        least ten trials from a fresh seed), recorded earlier or run now; a passing one
        recorded on fewer fresh seeds is not a verdict (``verify.reverified``). ``itself``
        ('eager' or 'compile'): the attempt is that baseline's own program, and a passing
        record says so (``EvaluationRecord.baseline_itself``)."""
        final = self.earlier(attempt, "final")
        if final is not None and (not final.passed or reverified(final)):
            return final
        # rounds > 1 times fresh baselines beside the candidate; not ``fresh_baselines``,
        # which would also retry compile baselines known to be unavailable or too slow to
        # warm up (``bench.slow_baselines``) while every other evaluator waits for the slot
        return self.evaluate(attempt, "final", reuse=False, workloads="all",
                             rounds=self.config.rounds, itself=itself,
                             **reverify_overrides(self.evaluator.options))

    def explore_timing(self) -> dict[str, Any]:
        """The timing overrides of the exploring evaluations: the config's, capped by the
        evaluator's own (exploring never times longer than the verdict)."""
        opts = self.evaluator.options
        return {"budget_ms": min(self.config.explore_budget_ms, opts.timing_budget_ms()),
                "max_calls": min(self.config.explore_max_calls, opts.max_calls)}

    def evaluate(self, attempt: int, kind: str, reuse: bool = True, itself: str = "",
                 **overrides: Any) -> EvaluationRecord:
        found = self.earlier(attempt, kind) if reuse else None
        if found is not None:
            return found
        path = self.run.solution_path(self.name, attempt)
        record = self._evaluate(path, itself, overrides)
        for _ in range(self.config.oom_retries):
            if record.passed or OUT_OF_GPU_MEMORY not in record.message:
                break
            # another evaluator on the GPU may have held the memory: the record is kept,
            # and the candidate judged again (a real excess fails again)
            self.led.add_evaluation(self.name, record.to_json(), kind=f"{kind}_oom",
                                    attempt=attempt)
            self.event("retried", scope=kind, attempt=attempt, message=record.message[:300])
            record = self._evaluate(path, itself, overrides)
        self.led.add_evaluation(self.name, record.to_json(), kind=kind, attempt=attempt)
        self.event("evaluation", scope=kind, attempt=attempt, status=record.status.value,
                   speedup_vs_best=speedup_vs_best(record.to_json()),
                   message=record.message[:300])
        return record


