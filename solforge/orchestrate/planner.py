"""The planner: many workers, many devices, effort where the measured headroom is.

One planner drives a run. It keeps a leaderboard per problem (the ledger's best verdict),
hands **work units** (one worker, one problem, one role) to ``workers`` threads, and picks
each next problem by headroom: ``weight * (1 - best SOL score)`` (or, where SOL is unknown,
``weight / best speedup``), the weight 1 or, for a problem ``solforge extract`` wrote, its
share of the model's time. A problem nobody tried yet gets twice its weight, times the
headroom its extraction estimated where there is one (``1 - model_roofline``, at least
``UNTRIED_FLOOR``: the model ran it at that fraction of its speed of light;
``models/roofline.py``): with no estimate it comes before every tried problem; a module
the model already ran near its bound may wait for one with more to give.

**Survey** (``PlannerConfig.survey``, when there are more problems than workers): before
any problem is searched, every problem's reference is judged once by a worker that can
(``units.Surveyor``: the search worker), in the order given, and its distance to speed of
light measured against the best it already has (the fastest of the reference and its
baselines: ``budget.best_baseline_fraction``). That measured fraction then stands in for
``model_roofline`` in the untried headroom, so the search starts where the gap is: on
KernelBench's set, listed in file order, a matmul already at its bound took the first
110 s while the ResNet block (6% of its bound) and two attention problems were cut by the
wall budget (benchmarks/results/2026-12-06-h100-s20). The worker's later unit reuses the
survey's evaluation (same candidate, same record), so a survey costs one evaluation the
search would have run anyway. When a budget ends the run, a surveyed problem no unit has
reached yet still gets one (``floor_problem``): the worker sees the stop, evaluates only
the compile baseline it owes, and judges its best, so no problem is left without a
verdict because it was nearest its bound; such units start only within a window after
the stop (``PlannerConfig.floor_s``, by default half the wall budget, at least 2
minutes), so a run of many problems still ends near its budget, and the problems left are
reported as not reached (``Run.summary``'s ``not_reached``). A problem is
**converged** once its SOL score reaches ``converge_sol`` while its best is at least as
fast as its best baseline (never on SOL alone: a wrong bound would end it early), after
``patience`` units in a
row that did not improve its best by 1%, or after ``max_units`` units. Per problem it can
run roles in turn (``roles``, e.g. diagnoser → optimizer → reviewer), each handed the best
attempt so far.

Every unit is a row of the ledger's ``work`` table (queued → running → done / failed), so a
run killed at any moment (``kill -9`` included) resumes with :meth:`Planner.resume`: units
that were running are requeued, finished ones are not redone, and the evaluations a
repeated unit asks for again come from the ledger's cache (``evalcache.py``).

Devices: each worker owns one evaluator (one judge process) on one device, workers are
spread round-robin over ``devices``; timing takes the device's slot (``bench/slots.py``),
so measurements never overlap while builds and correctness checks of other candidates
proceed on the CPU cores.

A unit that runs past ``unit_timeout_s`` is a stalled worker: its evaluator is closed
(which unblocks it), the unit is failed and its problem goes back to the queue.

Budgets for the whole run (0 = off): wall seconds, device seconds (the wall time of
evaluations on GPU devices: an upper bound of what the GPUs were held for), tokens, cost,
attempts. When one is spent no new unit starts (but a surveyed problem's first: see the
survey above), and running units are told (``Unit.stop``): the search worker ends its
exploration once a candidate passed, an LLM worker before its next model call; either
submits its best for the verdict.

Before reporting, every problem whose best verdict is not already a re-measured one gets
its **final verification**: the winner evaluated again on all workloads in a fresh runner,
interleaved with fresh baselines (``rounds``; one with ``final_rounds`` 0) and correctness
on at least 10 fresh seeds (``verify.FRESH_SEEDS``), recorded as kind ``final``; a winner
that fails is dropped for the next best. The search worker's verdicts already are such
re-measurements (kind ``final``, on >= 10 fresh seeds; a final on fewer is judged
again): the problems that get one are those whose best is a ``full`` verdict (an LLM
worker's).

Workers are looked up by kind (``PlannerConfig.agents``) in ``units.py``, which also holds
what a unit is and what a worker returns; the planner imports no worker.

Judges: the planner asks its ``backend`` (``backend.py``) for each worker's evaluator:
judge processes on this machine (``LocalBackend``, the default) or judge actors on a Ray
cluster (``ray_backend.py``, one per GPU); nothing above that call differs.

Not covered: workers away from the driver: on either backend they are threads here, and
the driver alone writes the ledger (docs/SCALE.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from solforge.bench import EvaluatorTampered, install_refusal
from solforge.orchestrate.backend import Backend, LocalBackend
from solforge.orchestrate.cut_short import cut_short_units
from solforge.orchestrate.evalcache import CachedEvaluator
from solforge.orchestrate.planner_config import (  # noqa: F401 (Budgets: re-export)
    FLOOR_MIN_S,
    Budgets,
    PlannerConfig,
    unknown_reopened,
)
from solforge.orchestrate.run import Run
from solforge.orchestrate.schedule import (  # noqa: F401 (UNTRIED_FLOOR: re-export)
    UNTRIED_FLOOR,
    ProblemState,
    headroom,
    weight_of,
)
from solforge.orchestrate.units import Unit, agent_factory
from solforge.orchestrate.verify import final_verification
from solforge.problems.spec import Problem
from solforge.records.options import EvalOptions


@dataclass
class WorkerState:
    name: str
    agent: str
    device: str
    state: str = "idle"
    unit: Unit | None = None
    started: float = 0.0
    evaluator: CachedEvaluator | None = None
    thread: threading.Thread | None = None


@dataclass
class PlannerResult:
    status: str
    reason: str
    problems: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: list[Any] = field(default_factory=list)  # what each unit's worker returned
    cache_hits: int = 0
    evaluations: int = 0


class Planner:
    def __init__(self, run: Run, problems: list[Problem], config: PlannerConfig,
                 options: EvalOptions, agent_settings: dict[str, dict[str, Any]] | None = None,
                 on_update: Callable[[Planner], None] | None = None,
                 on_unit_done: Callable[[Unit, Any], None] | None = None,
                 backend: Backend | None = None) -> None:
        self.run, self.config, self.options = run, config, options
        self.backend: Backend = backend or LocalBackend()
        self.on_update = on_update
        self.on_unit_done = on_unit_done
        self.results: list[Any] = []
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.stop_reason = ""
        self.stopped_at: float | None = None  # when a budget ended the run (monotonic)
        self.floor_closed = False  # the floor window ended (``floor_window_s``)
        self.halted = False  # stopped by a worker, not by a budget
        settings = agent_settings or {}
        self.fns = {a: agent_factory(a)(**settings.get(a, {})) for a in set(config.agents)}
        # a problem extracted from a model weighs its share of the model's time (Amdahl)
        self.problems = {p.name: ProblemState(p, weight=weight_of(p)) for p in problems}
        for p in problems:
            run.ledger.add_problem(p.name, str(p.path), p.category, weight=weight_of(p))
        # one worker of one kind is named after its kind ("search", "llm"): the names
        # that trajectories and workspaces carry
        self.workers = [
            WorkerState(name=(config.agents[0] if config.workers == 1 else
                              f"w{i}-{config.agents[i % len(config.agents)]}"),
                        agent=config.agents[i % len(config.agents)],
                        device=config.devices[i % len(config.devices)])
            for i in range(config.workers)]
        self._recover()

    # -- state from the ledger (fresh runs and resumed ones alike) ----------------------
    def _recover(self) -> None:
        led = self.run.ledger
        for w in led.work("running"):
            led.set_work(w["id"], "failed", data={**w["data"], "error": "interrupted"})
            led.event("unit_requeued", problem=w["problem"], unit=w["id"])
        cut = cut_short_units(led)
        for w in led.work():
            ps = self.problems.get(w["problem"])
            if ps is None or w["state"] != "done" or w["id"] in cut:
                continue
            ps.units += 1
            ps.stale = w["data"].get("stale", ps.stale)
        error = unknown_reopened(self.config.reopen, list(self.problems))
        if error:
            raise ValueError(error)
        # a reopening is kept in the ledger: a run stopped before the reopened unit ran
        # (or while it ran: a unit cut short does not count) owes it on every resume
        for e in led.events("problem_reopened"):
            ps = self.problems.get(e["problem"] or "")
            if ps is not None:
                ps.open_until = max(ps.open_until, int(e["data"].get("units", 0)) + 1)
        for name in self.config.reopen:
            ps = self.problems[name]
            if ps.open_until > ps.units:  # still owed from an earlier --reopen: not twice
                continue
            ps.open_until = ps.units + 1
            led.event("problem_reopened", problem=name, units=ps.units)
        for e in led.events("surveyed"):
            ps = self.problems.get(e["problem"] or "")
            if ps is not None:
                ps.surveyed = True
                ps.survey_roofline = e["data"].get("roofline_fraction")
        for ps in self.problems.values():
            self._refresh(ps)
            if ps.units:
                ps.surveyed = True
                self._check_converged(ps)

    def _refresh(self, ps: ProblemState) -> bool:
        """Re-read the problem's best verdict; True when it improved by more than 1%."""
        best = self.run.ledger.best(ps.problem.name)
        if best is None:
            return False
        sp = best.get("speedup_vs_best") or 0.0
        improved = ps.best_speedup is None or sp > ps.best_speedup * 1.01
        if ps.best_speedup is None or sp > ps.best_speedup:
            ps.best_speedup = sp
        ps.best_sol = best.get("sol_score")
        return improved

    def _check_converged(self, ps: ProblemState) -> None:
        cfg = self.config
        if ps.units < ps.open_until:
            return
        # a SOL score says "near the bound" only while the best is at least as fast as the
        # best baseline: a bound set too low must not end a problem behind its baselines
        # (fp32 convolutions bounded at the SIMT rate: benchmarks/results/2026-12-03-h200-s12)
        if ps.best_sol is not None and ps.best_sol >= cfg.converge_sol \
                and (ps.best_speedup or 0.0) >= 1.0:
            ps.converged = f"SOL score {ps.best_sol:.2f} >= {cfg.converge_sol}"
        elif ps.stale >= cfg.patience:
            ps.converged = f"{ps.stale} units without a 1% gain"
        elif ps.units >= cfg.max_units:
            ps.converged = f"{ps.units} units"
        if ps.converged:
            state = "converged" if ps.best_speedup is not None else "exhausted"
            self.run.ledger.set_problem_state(ps.problem.name, state)

    # -- budgets ---------------------------------------------------------------------------
    def budget_spent(self) -> str:
        b, led = self.config.budgets, self.run.ledger
        if b.wall_s and time.monotonic() - self.started >= b.wall_s:
            return f"wall-time budget ({b.wall_s:g} s) spent"
        if b.attempts and len(led.attempts()) >= b.attempts:
            return f"attempt budget ({b.attempts}) spent"
        if b.tokens or b.cost_usd:
            u = led.usage_totals()
            if b.tokens and u["input_tokens"] + u["output_tokens"] >= b.tokens:
                return f"token budget ({b.tokens}) spent"
            if b.cost_usd and u["cost_usd"] >= b.cost_usd:
                return f"cost budget (${b.cost_usd:g}) spent"
        if b.device_s:
            used = sum((e["record"].get("duration_s") or 0.0) for e in led.evaluations()
                       if not str(e["record"].get("device", "cpu")).startswith("cpu"))
            if used >= b.device_s:
                return f"device-time budget ({b.device_s:g} s) spent"
        return ""

    # -- scheduling ------------------------------------------------------------------------
    def headroom(self, ps: ProblemState) -> float:
        return headroom(ps)

    def next_problem(self) -> ProblemState | None:
        open_ = [ps for ps in self.problems.values() if not ps.converged and not ps.busy]
        if not open_:
            return None
        return max(open_, key=lambda ps: (self.headroom(ps), -ps.units))

    def next_survey(self, w: WorkerState) -> ProblemState | None:
        """The next problem whose reference ``w`` should judge first (the survey: see the
        module docstring), in the order given; None when there is none or ``w``'s kind
        cannot survey."""
        if not self.config.survey or len(self.problems) <= len(self.workers) or \
                getattr(self.fns[w.agent], "survey", None) is None:
            return None
        return next((ps for ps in self.problems.values()
                     if not (ps.surveyed or ps.busy or ps.converged)), None)

    def _evaluator(self, w: WorkerState) -> CachedEvaluator:
        if w.evaluator is None:
            opts = self.options.model_copy(update={"device": w.device})
            w.evaluator = CachedEvaluator(self.backend.evaluator(opts, w.name), self.run.ledger)
        return w.evaluator

    def _run_survey(self, w: WorkerState, ps: ProblemState) -> None:
        unit = Unit(id=0, problem=ps.problem.name, agent=w.agent, role="survey",
                    worker=w.name, stop=lambda: self.stop_reason or "")
        fraction = None
        try:
            fraction = self.fns[w.agent].survey(self.run, ps.problem, self._evaluator(w), unit)
        except EvaluatorTampered as e:  # no verdict can be trusted any more: stop the run
            with self.lock:
                self.stop_reason = self.stop_reason or f"the evaluator's own files changed: {e}"
                self.halted = True
        except Exception as e:  # the unit that follows meets it again and records it
            self.run.ledger.event("survey_failed", problem=ps.problem.name, worker=w.name,
                                  error=f"{type(e).__name__}: {e}")
        with self.lock:
            ps.surveyed, ps.survey_roofline = True, fraction
            ps.busy = False
            w.state = "idle"

    def _make_unit(self, ps: ProblemState, w: WorkerState) -> Unit:
        led = self.run.ledger
        role = self.config.roles[ps.units % len(self.config.roles)]
        best = led.best(ps.problem.name)
        start, parent = None, None
        if best is not None and best.get("attempt"):
            att = led.attempt(best["attempt"])
            if att is not None:
                path = self.run.solution_path(ps.problem.name, f"best-{att['id']}")
                path.write_text(att["source"])
                start, parent = path, att["id"]
        # the n-th unit of a problem keeps its name when it is redone after a crash, so
        # an LLM worker resumes its trajectory instead of starting over
        ordinal = ps.units + 1
        wid = led.add_work(ps.problem.name, w.agent, {"role": role, "worker": w.name,
                                                      "ordinal": ordinal})
        return Unit(id=wid, problem=ps.problem.name, agent=w.agent, role=role,
                    worker=w.name if ordinal == 1 else f"{w.name}-{ordinal}",
                    start_from=start, parent_attempt=parent,
                    stop=lambda: self.stop_reason or "")

    def _run_unit(self, w: WorkerState, ps: ProblemState, unit: Unit) -> None:
        led = self.run.ledger
        led.set_work(unit.id, "running", worker=w.name)
        error = ""
        result = None
        try:
            result = self.fns[w.agent](self.run, ps.problem, self._evaluator(w), unit)
        except EvaluatorTampered as e:  # no verdict can be trusted any more: stop the run
            error = f"the evaluator's own files changed: {e}"
            with self.lock:
                self.stop_reason = self.stop_reason or error
                self.halted = True
        except Exception as e:  # a worker bug or a stall: the unit fails, the run goes on
            error = f"{type(e).__name__}: {e}"
        with self.lock:
            if result is not None:
                self.results.append(result)
                # a worker that finds the run cannot go on (a dead model endpoint before
                # its first step) stops it: no point starting the other problems
                stop = getattr(result, "stop_run", "")
                if stop and not self.stop_reason:
                    self.stop_reason = stop
                    self.halted = True
            improved = self._refresh(ps)
            # a unit the run's stop cut short does not count: a resumed run goes on
            cut = getattr(result, "cut_short", "") if result is not None else ""
            if not cut:
                ps.units += 1
                ps.stale = 0 if improved else ps.stale + 1
            led.set_work(unit.id, "failed" if error else "done",
                         data={"role": unit.role, "worker": w.name, "error": error,
                               "stale": ps.stale, "best": ps.best_speedup,
                               "cut_short": cut})
            if error:
                led.event("unit_failed", problem=ps.problem.name, worker=w.name, error=error)
            self._check_converged(ps)
            ps.busy = False
            w.state, w.unit = "idle", None
        if self.on_unit_done is not None:
            self.on_unit_done(unit, result)

    def _dispatch(self) -> bool:
        """Start units on idle workers; False when nothing is running or left to start."""
        with self.lock:
            if not self.stop_reason:
                self.stop_reason = self.budget_spent()
            if self.stop_reason and self.stopped_at is None:
                self.stopped_at = time.monotonic()
            for w in self.workers:
                if w.state != "idle":
                    continue
                if self.stop_reason:
                    ps = self.floor_problem()
                    if ps is None:
                        continue
                    ps.floored = True
                    self.run.ledger.event("floor_unit", problem=ps.problem.name,
                                          reason=self.stop_reason)
                    self._start_unit(w, ps)
                    continue
                ps = self.next_survey(w)
                if ps is not None:
                    ps.busy = True
                    w.state, w.started = "surveying", time.monotonic()
                    w.thread = threading.Thread(target=self._run_survey, args=(w, ps),
                                                name=w.name, daemon=True)
                    w.thread.start()
                    continue
                ps = self.next_problem()
                if ps is None:
                    break
                self._start_unit(w, ps)
            running = any(w.state in ("running", "surveying") for w in self.workers)
            if self.stop_reason:
                return running or self.floor_problem() is not None
        return running or self.next_problem() is not None

    def _start_unit(self, w: WorkerState, ps: ProblemState) -> None:
        ps.busy = True
        unit = self._make_unit(ps, w)
        w.state, w.unit, w.started = "running", unit, time.monotonic()
        w.thread = threading.Thread(target=self._run_unit, args=(w, ps, unit),
                                    name=w.name, daemon=True)
        w.thread.start()

    def floor_problem(self) -> ProblemState | None:
        """Once a budget is spent (not when the run halted): a surveyed problem no unit
        ran on yet, which still gets one. Its worker sees the stop and evaluates only what
        it owes (the compile baseline as a candidate, where it beat the reference), then
        judges the best for the verdict: every surveyed problem ends with a judged
        solution no slower than its best baseline, not only the ones reached before the
        budget ran out (the survey puts those nearest their bound last). One such unit a
        problem (``floored``), and none once the floor window is over
        (:meth:`floor_window_s`): the problems left are not reached (the run's summary
        lists them) and a resumed run goes on with them."""
        if self.halted or self.floor_closed:
            return None
        owed = [ps for ps in self.problems.values()
                if ps.surveyed and ps.units == 0 and not (ps.busy or ps.converged or ps.floored)]
        if not owed:
            return None
        window = self.floor_window_s()
        if self.stopped_at is not None and window is not None and \
                time.monotonic() - self.stopped_at >= window:
            # past the window: the run ends near its budget, the rest waits for a resume
            self.floor_closed = True
            self.run.ledger.event("floor_closed", window_s=window,
                                  left=[ps.problem.name for ps in owed])
            return None
        return owed[0]

    def floor_window_s(self) -> float | None:
        """How long after a budget ended floor units may still start (``floor_s``; by
        default half the wall budget, at least ``FLOOR_MIN_S``; None, no limit, without a
        wall budget). A corpus of 170 problems had 24 surveyed and none searched when a
        315 s budget ended, and their floor units would have run for about 24 minutes
        more (benchmarks/results/2026-12-06-h100-s23, call 3)."""
        if self.config.floor_s is not None:
            return self.config.floor_s
        wall = self.config.budgets.wall_s
        return max(FLOOR_MIN_S, wall / 2) if wall else None

    def _watch_stalls(self) -> None:
        limit = self.config.unit_timeout_s
        if not limit:
            return
        for w in self.workers:
            if w.state == "running" and time.monotonic() - w.started > limit and w.evaluator:
                self.run.ledger.event("worker_stalled", worker=w.name,
                                      problem=w.unit.problem if w.unit else "")
                w.state = "stalled"
                w.evaluator.close()  # unblocks its evaluate(); the unit then fails

    def loop(self, poll_s: float = 0.2) -> PlannerResult:
        """Run until every problem converged or a budget is spent; then verify. A run on
        an install whose files changed since a judge found them tampered, or that no
        longer matches its install record, starts nothing (``bench/judge/install.py``)."""
        refused = install_refusal()
        if refused:
            self.stop_reason = f"the evaluator's own files changed: {refused}"
            self.halted = True
        try:
            while self._dispatch():
                if self.on_update:
                    self.on_update(self)
                self._watch_stalls()
                time.sleep(poll_s)
            # every winner is checked on fresh seeds before it is reported, re-measured
            # or not (final_rounds 0: one round)
            if not self.halted:
                self._final_verification()
        finally:
            for w in self.workers:
                if w.evaluator is not None:
                    w.evaluator.close()
        done = all(ps.converged for ps in self.problems.values())
        reason = self.stop_reason or ("every problem converged" if done else "stopped")
        self.run.ledger.set_meta("stop_reason", reason)
        if self.halted:
            self.run.ledger.event("run_stopped", message=reason)
        self.run.mark("stopped" if self.halted or not (done or self.stop_reason)
                      else "finished")
        if self.on_update:
            self.on_update(self)
        hits = sum(w.evaluator.hits for w in self.workers if w.evaluator)
        misses = sum(w.evaluator.misses for w in self.workers if w.evaluator)
        return PlannerResult(
            status=self.run.status(), reason=reason, results=list(self.results),
            cache_hits=hits, evaluations=misses,
            problems={n: {"units": ps.units, "best_speedup": ps.best_speedup,
                          "best_sol": ps.best_sol, "converged": ps.converged}
                      for n, ps in self.problems.items()})

    def _final_verification(self) -> None:
        """Re-measure each problem's winner unless its best verdict already is such a
        re-measurement (``verify.final_verification``)."""
        def reread(name: str) -> None:
            # a rejected winner's figure must not stay: the best is whatever passed now
            ps, best = self.problems[name], self.run.ledger.best(name)
            ps.best_speedup = (best.get("speedup_vs_best") or 0.0) if best else None
            ps.best_sol = best.get("sol_score") if best else None

        final_verification(self.run, {n: ps.problem for n, ps in self.problems.items()},
                           self.options.model_copy(update={"device": self.workers[0].device}),
                           max(1, self.config.final_rounds), reread,
                           make_evaluator=lambda o: self.backend.evaluator(o, "final"))
