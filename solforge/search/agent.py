"""The search worker: candidates from the generators, cheapest first, judged by the
evaluator, the best kept and re-measured. No model, no key, no network.

:func:`run_search_worker` on one problem:

1. **Generate** (``candidates.py``): trace the reference, find library patterns, ask every
   registered generator; candidates come cheapest first, parents before children.
2. **Explore** on the visible workloads (``workloads="visible"``, as an agent sees them):
   each candidate is an attempt in the ledger (agent ``search``, its levers, its reasoning,
   its parent), its file frozen at ``run.solution_path(problem, attempt)``, its record a
   ``visible`` evaluation, timed with the smaller ``explore_budget_ms`` and
   ``explore_max_calls`` (these figures only rank candidates). The reference goes first;
   what its baselines show reorders the rest (``reorder.reorder_after_reference``:
   compiled candidates next when torch.compile beat it, CUDA-graph replays last, and of
   those only ``graph_candidates``, the replay of the best candidate so far first:
   ``reorder.graphs_of_the_best_first``).
   When torch.compile's baseline beat the reference, the candidate that is that baseline
   (the reference compiled in the baseline's own mode) goes first and is owed: it is
   evaluated whatever the budgets and the stop say (``reorder.baseline_first``), so a
   cut never keeps a solution slower than the best baseline for want of it. Where that
   candidate fails its correctness trials, no later evaluation of the problem holds a
   candidate to the baseline's time there (``SearchState.compile_failed``). Likewise a
   candidate of library kernels that passed but is host-bound (its calls take far longer
   on the judge's clock than its kernels: Triton's launch path) owes its CUDA-graph replay
   (``reorder.replay_of_host_bound``): the clock check may fail it at the verdict.
   A candidate faster than eager, where torch.compile's baseline beat eager too, moves
   its compiled-around child up next (``reorder.compiled_after_a_winning_part``).
   The budgets scale with the reference's gap to speed of light and, for a problem taken
   from a model, with its share of the model's time (``budget.gap_scale``),
   and the exploration ends once a passing candidate reaches ``sol_done``, or runs as fast
   as the best baseline at ``roofline_done`` of its speed-of-light bound.
   Skipped: a family after ``family_failures`` failed candidates, a candidate whose
   parent failed, anything past a budget (``SearchConfig``).
3. **Verdict and re-measurement**, one evaluation: the best passing candidate by
   ``speedup_vs_best`` (geomean over workloads of min(eager, compile) / time) is evaluated
   on every workload, held-out ones included, in a fresh runner with ``rounds``
   interleaved rounds of candidate and fresh baselines (a compile baseline too slow to
   warm up again keeps its earlier figure: ``bench.slow_baselines``), with the
   evaluator's own timing budget and at least ten correctness trials from a fresh random
   seed (``orchestrate.verify.reverify_overrides``: a verdict that depends on the seed is
   not a verdict) (``final``); if it fails, the next one is tried (``verdict_tries``). Why one
   evaluation: a fresh-process interleaved evaluation on all workloads is both the
   verdict (correctness and anti-cheat checks on every workload) and the honest figure
   (the best of several noisy figures is biased upwards, so the one that ranked the
   winner is never reported); a separate verdict before it would judge the same
   workloads again, at full cost. The first ``final`` that passes is the result, and its
   figure the one reported, unless it is slower than the best baseline: then that
   baseline's own program (``compile``, or the reference for eager) is judged as well
   and kept when it does better (``_baseline_fallback``: as the baseline itself it reads
   1.00x), so a near-tie the re-measurement reversed never keeps a solution below 1.0.

Besides budgets, the exploration ends early when the run is stopping (``stop()``, the
planner's: its wall budget spent) once some candidate passed: the best so far still gets
its verdict, so a run cut by its budget keeps a judged solution per started problem;
the problem's state is then ``stopped`` and the result says ``cut_short``, so a resumed
run goes on with it (the planner does not count such a unit). When
torch.compile could not settle on the reference, or took ``slow_compile_s`` to warm up
its baselines (``reorder.slow_compile_reason``), the compiled candidates are skipped:
each would recompile as long at every correctness trial, inside the device's slot, while
the other workers wait. A candidate that failed with a GPU out-of-memory error is judged
again (``oom_retries``; the first record is kept as ``<kind>_oom``): another evaluator on
the GPU may have held the memory.

Budgets are per problem and cover the exploration; the verdict always runs.
``gpu_seconds`` counts the wall time of the candidate's own phases of each evaluation
(``budget.CHARGED_PHASES``: its correctness trials, policy probe, timing and host-clock
batch; on a CPU, the CPU's). Not charged: waits for the device's slot (``slot_wait``: other
workers' measurements, tens of seconds with four workers:
benchmarks/results/2026-12-01-h200-s5), the wait for a spare runner, the judge's start,
building the reference, preparing the baselines (compiled once per problem; charged,
they alone would spend a short budget on the first candidate:
benchmarks/results/2026-12-01-h200-s4) and the closing;
``compile_seconds`` counts the time the evaluator spends building, loading and checking
candidates (its ``build`` and ``candidate`` phases: imports, Triton JIT, ``torch.compile``,
correctness trials), measured from its phase messages.

When nothing beats the baselines the result says so: the kept solution is then the
reference itself or its compiled form, with a speedup near or below 1. Under the
evaluator's ``strict`` policy, candidates that import and run the problem file
(``Candidate.calls_reference``; no built-in family makes one: they copy the reference's
code instead) are not evaluated, since that policy rejects them.

Resuming (``resume``): candidates a search worker judged before on this problem (same
source) keep their attempts and evaluations, free of this call's budget, so a later unit
goes on where an earlier one stopped; a ``final`` already recorded is reused, unless it
passed on fewer fresh seeds than a verdict takes (``verify.reverified``).

Not covered: several search workers on one problem at the same moment (they may judge
the same candidate twice); spending leftover budget on more variants of the winner (the
candidate list is fixed once generated); ranking by figures of one timing budget when a
resumed run mixes visible records of different budgets (a resume with another
``explore_budget_ms``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from solforge.bench import Evaluator, EvaluatorTampered
from solforge.orchestrate.cut_short import STOPPING
from solforge.orchestrate.evalcache import CachedEvaluator
from solforge.orchestrate.run import Run
from solforge.orchestrate.units import Unit, WorkerResult
from solforge.problems.spec import Problem
from solforge.records import speedup_vs_best
from solforge.records.evaluation import EvaluationRecord, Status
from solforge.search.budget import (
    PhaseClock,
    best_baseline_fraction,
    charged_seconds,
    estimated_seconds,
    gap_scale,
    roofline_fraction,
)
from solforge.search.candidates import Candidate, generate_candidates, search_context
from solforge.search.config import SearchConfig
from solforge.search.reorder import (
    BASELINE_CANDIDATE,
    BASELINE_PROGRAMS,
    baseline_first,
    compiled_after_a_winning_part,
    graphs_of_the_best_first,
    reorder_after_reference,
    replay_of_host_bound,
    slow_compile_reason,
)
from solforge.search.state import SearchState
from solforge.search.trace import preload_compiler


def _limit(config: SearchConfig, gpu: bool) -> int:
    return config.max_candidates or (12 if gpu else 6)


def run_search_worker(run: Run, problem: Problem, evaluator: Evaluator,
                      config: SearchConfig | None = None,
                      on_event: Callable[..., None] | None = None,
                      stop: Callable[[], str] | None = None) -> WorkerResult:
    """Search ``problem`` and record everything in ``run`` (see the module docstring).

    ``evaluator`` is an :class:`Evaluator` or anything with its ``options`` and
    ``evaluate`` (the planner's cache). ``on_event(kind, problem=..., **data)`` sees
    ``candidate``, ``skipped`` and ``evaluation`` events as they happen (the ledger keeps
    them too). Never raises for anything a candidate does; the result and the ledger say
    how it ended. :class:`~solforge.bench.judge.guard.EvaluatorTampered` (the evaluator's own
    files changed: no verdict can be trusted any more) is recorded and raised.
    ``stop()`` (the planner's: its budget spent) returning a reason ends the exploration
    once a candidate passed; the best so far still gets its final verdict.
    """
    config = config or SearchConfig()
    s = SearchState(run, problem, evaluator, config, on_event, stop)
    run.ledger.add_problem(problem.name, str(problem.path), problem.category)
    run.ledger.set_problem_state(problem.name, "active")
    try:
        return _search(s)
    except EvaluatorTampered as e:
        run.ledger.set_problem_state(problem.name, "failed")
        s.event("worker_finished", status="error", message=str(e))
        raise


def survey_reference(run: Run, problem: Problem, evaluator: Evaluator,
                     config: SearchConfig | None = None) -> float | None:
    """Judge ``problem``'s reference candidate on the visible workloads, exactly as the
    search's first step does (same candidate file, same attempt, same ``visible``
    record, same timing overrides), and return its fraction of speed of light
    against the best it already has (``budget.best_baseline_fraction``: bound over the
    fastest of the reference and its baselines; None when unknown or it failed).

    The planner calls it for every problem before searching any (``Surveyor``); a later
    :func:`run_search_worker` on the problem finds the attempt and its record (``resume``)
    and goes on from them, budget-free. Records a ``surveyed`` event. Never raises for
    anything the reference does (a failing reference is recorded as such);
    :class:`EvaluatorTampered` is raised, as in the search. Not covered: a problem the
    tracer cannot load (the reference is judged all the same: its candidate needs no
    trace)."""
    config = config or SearchConfig()
    s = SearchState(run, problem, evaluator, config, None)
    run.ledger.add_problem(problem.name, str(problem.path), problem.category)
    ctx = search_context(problem, evaluator.options.device, evaluator.options.compile_mode)
    cands, errors = generate_candidates(ctx, ["reference"])
    if not cands:
        s.event("surveyed", status="error", message=str(errors)[:300])
        return None
    c = cands[0]
    attempt = s.known_attempt(c)
    record = s.earlier(attempt, "visible") if attempt is not None else None
    if record is None:
        attempt = s.attempt(c)
        s.event("candidate", candidate=c.name, attempt=attempt, family=c.family,
                levers=c.levers, cost=c.cost, survey=True)
        record = s.evaluate(attempt, "visible", workloads="visible", **s.explore_timing())
    fraction = best_baseline_fraction(record) if record.passed else None
    s.event("surveyed", status=record.status.value, roofline_fraction=fraction,
            speedup_vs_compile=record.speedup_vs_compile, sol_score=record.sol_score)
    return fraction


class SearchWorker:
    """The planner's worker kind ``search``: ``SearchWorker(**settings)`` takes
    :class:`SearchConfig` fields (a bad one fails when the planner is built) and runs one
    unit as :func:`run_search_worker`, under the unit's worker name; ``survey`` judges a
    problem's reference alone (:func:`survey_reference`, the planner's survey)."""

    def __init__(self, **settings: Any) -> None:
        self.config = SearchConfig(**settings)
        # built by the planner before its worker threads start: the compiler's modules are
        # imported here, once, not by two workers' first traces at once
        preload_compiler()

    def __call__(self, run: Run, problem: Problem, evaluator: CachedEvaluator,
                 unit: Unit) -> WorkerResult:
        cfg = self.config.model_copy(update={"worker": unit.worker})
        return run_search_worker(run, problem, evaluator, cfg, stop=unit.stop)

    def survey(self, run: Run, problem: Problem, evaluator: CachedEvaluator,
               unit: Unit) -> float | None:
        cfg = self.config.model_copy(update={"worker": unit.worker})
        try:
            return survey_reference(run, problem, evaluator, cfg)
        except EvaluatorTampered:
            run.ledger.set_problem_state(problem.name, "failed")
            raise


def _search(s: SearchState) -> WorkerResult:
    config, led, name = s.config, s.led, s.name
    result = WorkerResult(problem=name, status="error")
    opts = s.evaluator.options
    s.event("worker_started", agent="search", device=opts.device)
    ctx = search_context(s.problem, opts.device, opts.compile_mode)
    if ctx.trace_error:
        s.event("trace_failed", message=ctx.trace_error)
    for err in ctx.pattern_errors:
        s.event("pattern_failed", message=err)
    cands, errors = generate_candidates(ctx, config.families)
    for gen, err in errors.items():
        s.event("generator_failed", generator=gen, message=err)
    for err in ctx.rewrite_errors:  # a pattern matched, its candidate could not be made
        s.event("rewrite_failed", message=err)
    for note in ctx.declined:  # a family looked and offered nothing
        s.event("family_declined", message=note)
    if opts.policy == "strict":
        # they run the reference's own forward: the strict policy rejects every one
        for c in (c for c in cands if c.calls_reference):
            s.event("skipped", candidate=c.name, reason="runs the reference's forward, "
                    "which the strict policy rejects")
        cands = [c for c in cands if not c.calls_reference]
    s.event("candidates", names=[c.name for c in cands],
            patterns=[m.description for m in (*ctx.matches, *ctx.variant_matches)])
    tried = _explore(s, cands, _limit(config, ctx.gpu))
    result.steps = tried
    ranked = sorted((c for c in cands if c.name in s.visible and s.visible[c.name].passed),
                    key=lambda c: -s.score(s.visible[c.name]))
    if not ranked:
        msg = (f"none of the {tried} candidates passed the visible workloads"
               if tried else "no candidate was evaluated")
        led.set_problem_state(name, "failed")
        s.event("worker_finished", status="failed", message=msg)
        return result.model_copy(update={"status": "failed", "message": msg})
    winner, final = None, None
    for c in ranked[:config.verdict_tries]:
        final = s.verdict(s.attempts[c.name], itself=BASELINE_PROGRAMS.get(c.name, ""))
        if final.passed:
            winner = c
            break
    if winner is None:
        assert final is not None
        msg = f"the best candidates failed the final verdict: {final.message[:300]}"
        led.set_problem_state(name, "exhausted")
        s.event("worker_finished", status="finished", message=msg, verdict=final.status.value)
        return result.model_copy(update={
            "status": "finished", "message": msg, "verdict": final.status.value,
            "attempt": s.attempts[ranked[0].name]})
    fallback = _baseline_fallback(s, cands, winner, final)
    if fallback is not None:
        winner, final = fallback
    attempt = s.attempts[winner.name]
    msg = _summary(winner, s.visible[winner.name], final)
    if s.cut_short:
        msg += f"; exploration cut short: {s.cut_short}"
    # cut short, the problem is not done: a resumed run goes on with it (planner.py)
    led.set_problem_state(name, "stopped" if s.cut_short else "converged")
    s.event("worker_finished", status="finished", message=msg, attempt=attempt,
            candidate=winner.name, levers=winner.levers, verdict=final.status.value,
            speedup_vs_best=speedup_vs_best(final.to_json()))
    return result.model_copy(update={
        "status": "finished", "message": msg, "verdict": final.status.value,
        "attempt": attempt, "cut_short": s.cut_short,
        "speedup_vs_eager": final.speedup_vs_eager,
        "speedup_vs_compile": final.speedup_vs_compile, "sol_score": final.sol_score})


def _baseline_fallback(s: SearchState, cands: list[Candidate], winner: Candidate,
                       final: EvaluationRecord) -> tuple[Candidate, EvaluationRecord] | None:
    """When the winner's verdict came out slower than the best baseline (a near-tie on the
    visible workloads that the re-measurement over all workloads reversed), the program
    of the baseline that was faster in that verdict's rounds (``compile``, or the
    ``reference`` for eager; ``reorder.BASELINE_PROGRAMS``) is judged too, and kept
    when it does better: as that baseline's own program it reads 1.00x against it, so no
    problem keeps a solution slower than its best baseline. None when the winner is a
    baseline program already, reached 1.0, or that program never passed the visible
    workloads (it is not judged then).

    Not covered: the noise of a true tie: a winner as fast as its baseline reads a little
    above or below 1.0 by chance, and is kept above it (the baseline's program below)."""
    measured = speedup_vs_best(final.to_json())
    if measured is None or measured >= 1.0 or winner.name in BASELINE_PROGRAMS:
        return None
    name = faster_baseline_program(final)
    base = next((c for c in cands if c.name == name), None)
    seen = s.visible.get(name)  # judged on the visible workloads: it has its attempt
    if base is None or seen is None or not seen.passed:
        return None
    again = s.verdict(s.attempts[name], itself=BASELINE_PROGRAMS[name])
    kept = again.passed and (speedup_vs_best(again.to_json()) or 0.0) > measured
    s.event("baseline_fallback", candidate=winner.name, speedup_vs_best=measured,
            baseline=name, kept=kept, verdict=again.status.value)
    return (base, again) if kept else None


def faster_baseline_program(final: EvaluationRecord) -> str:
    """The program of the baseline the verdict held its candidate to: ``compile`` where
    torch.compile was the faster baseline and counted on every workload, else the
    ``reference`` (eager). A compile figure outside the problem's tolerance is timed but is
    not the best baseline, so its program is no fallback: KernelBench's
    ``93_masked_cumsum`` (H100, session 30) kept CUDA graphs at 0.58x of eager because the
    fallback looked for the failed compile program instead of the reference."""
    vs_eager, vs_compile = final.speedup_vs_eager, final.speedup_vs_compile
    counts = all(w.compile_within_tolerance is not False for w in final.workloads)
    if counts and vs_eager is not None and vs_compile is not None and vs_compile < vs_eager:
        return "compile"
    return "reference"


# a candidate within this of the best baseline's speed counts as as fast as it
NEAR_BEST = 0.99


def _skip_reason(s: SearchState, c: Candidate, cands: list[Candidate], limit: int, tried: int,
                 spent: float, clock: PhaseClock, failures: Counter[str],
                 failed: set[str], graphs: int) -> str | None:
    cfg = s.config
    if c.name in s.owed:
        return None
    stopping = s.stop()
    if stopping and any(r.passed for r in s.visible.values()):
        return f"{STOPPING} ({stopping}); the best so far is kept"
    best_sol = max((r.sol_score for r in s.visible.values()
                    if r.passed and r.sol_score is not None), default=None)
    if best_sol is not None and best_sol >= cfg.sol_done:
        return f"SOL score {best_sol:.2f} reached (sol_done {cfg.sol_done}): the gap is closed"
    # as fast as the best baseline, so a bound set too high cannot end a search behind it
    near = max((roofline_fraction(r) or 0.0 for r in s.visible.values()
                if r.passed and s.score(r) >= NEAR_BEST), default=0.0)
    if near >= cfg.roofline_done:
        return (f"runs at {near:.3f} of its speed-of-light bound (roofline_done "
                f"{cfg.roofline_done}): the gap is closed")
    if tried >= limit:
        return f"max_candidates ({limit}) reached"
    gpu_s, compile_s = cfg.gpu_seconds * s.scale, cfg.compile_seconds * s.scale
    if spent >= gpu_s:
        return f"gpu_seconds budget spent ({spent:.0f} of {gpu_s:.0f} s)"
    if clock.compile_s >= compile_s:
        return f"compile_seconds budget spent ({clock.compile_s:.0f} of {compile_s:.0f} s)"
    cost = estimated_seconds(c, s.compile_seen)
    if cost > gpu_s - spent:
        return f"estimated {cost:.0f} s, more than the {gpu_s - spent:.0f} s left"
    if "cuda_graphs" in c.levers and graphs >= cfg.graph_candidates:
        return f"graph_candidates ({cfg.graph_candidates}) reached"
    if failures[c.family] >= cfg.family_failures:
        return f"family {c.family} failed {failures[c.family]} times"
    if c.parent in failed:
        return f"its parent {c.parent} failed"
    if c.parent is not None and c.parent not in s.attempts and \
            any(x.name == c.parent for x in cands):
        return f"its parent {c.parent} was not evaluated"
    return None


def _explore(s: SearchState, cands: list[Candidate], limit: int) -> int:
    """Evaluate candidates on the visible workloads within the budgets; returns how many
    were evaluated now (those judged in an earlier session are reused, budget-free).
    After the reference, the rest are reordered (``reorder_after_reference``)."""
    failures: Counter[str] = Counter()
    failed: set[str] = set()
    tried, spent, graphs, graphs_ordered = 0, 0.0, 0, False
    queue = list(cands)
    with PhaseClock(s.evaluator) as clock:
        while queue:
            if "cuda_graphs" in queue[0].levers and not graphs_ordered:
                # the graphs come last (reorder_after_reference): by now the scores say
                # whose replay is worth the one graph evaluation
                graphs_ordered = True
                queue = graphs_of_the_best_first(
                    queue, {n: s.score(r) for n, r in s.visible.items()})
            c = queue.pop(0)
            attempt = s.known_attempt(c)
            record = s.earlier(attempt, "visible") if attempt is not None else None
            charged = 0.0  # a record from earlier (the planner's survey, a resumed run)
            if record is None:
                reason = _skip_reason(s, c, cands, limit, tried, spent, clock, failures,
                                      failed, graphs)
                if reason is not None:
                    s.event("skipped", candidate=c.name, reason=reason)
                    if reason.startswith(STOPPING):
                        s.cut_short = s.cut_short or reason
                    continue
                attempt = s.attempt(c)
                s.event("candidate", candidate=c.name, attempt=attempt, family=c.family,
                        levers=c.levers, cost=c.cost)
                start = time.monotonic()
                record = s.evaluate(attempt, "visible", workloads="visible",
                                    **s.explore_timing())
                clock.stop()  # the last phase ends with the evaluation
                charged = charged_seconds(record, time.monotonic() - start)
                spent += charged
                tried += 1
            s.saw_compile(c, record, charged)
            graphs += "cuda_graphs" in c.levers
            s.attempts[c.name] = attempt
            s.visible[c.name] = record
            if c.name == BASELINE_CANDIDATE and record.status is Status.INCORRECT_NUMERICAL:
                s.compile_failed(record)
            if not record.passed:
                failures[c.family] += 1
                failed.add(c.name)
            # the first evaluation of the problem prepares its baselines: whichever
            # candidate it was, its record says how torch.compile fared on the reference
            slow = slow_compile_reason(record, s.config.slow_compile_s)
            if slow is not None:
                for x in (x for x in queue if "compile" in x.levers):
                    s.event("skipped", candidate=x.name, reason=slow)
                queue = [x for x in queue if "compile" not in x.levers]
            if c.family == "reference" and s.config.budget_by_gap:
                s.scale = gap_scale(record, s.problem.model_share)
                if s.scale != 1.0:
                    s.event("budget_scaled", scale=round(s.scale, 2),
                            sol_score=record.sol_score,
                            roofline_fraction=roofline_fraction(record),
                            model_share=s.problem.model_share)
            if record.passed and queue:
                queue, owed = replay_of_host_bound(queue, c, record)
                if owed is not None:
                    s.owed.add(owed)
                    s.event("reordered", names=[x.name for x in queue], owed=owed,
                            host_bound=c.name)
                moved = compiled_after_a_winning_part(queue, c, record)
                if moved is not queue:
                    queue = moved
                    s.event("reordered", names=[x.name for x in queue], compiled_part=c.name)
            if c.family == "reference" and queue:
                reordered, owed = baseline_first(reorder_after_reference(queue, record),
                                                 record)
                if owed is not None:
                    s.owed.add(owed)
                if [x.name for x in reordered] != [x.name for x in queue]:
                    s.event("reordered", names=[x.name for x in reordered],
                            speedup_vs_compile=record.speedup_vs_compile, owed=owed)
                queue = reordered
    s.event("budget", candidates=tried, eval_seconds=round(spent, 1),
            compile_seconds=round(clock.compile_s, 1))
    return tried


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "n/a"


def _summary(winner: Candidate, visible: EvaluationRecord, final: EvaluationRecord) -> str:
    seen = speedup_vs_best(visible.to_json())
    measured = speedup_vs_best(final.to_json())
    if not winner.levers:
        head = "no candidate beat the reference; kept the reference itself"
    elif measured is not None and measured < 1.0:
        head = (f"nothing beat the best baseline; kept `{winner.name}` "
                f"({', '.join(winner.levers)})")
    else:
        head = f"kept `{winner.name}` ({', '.join(winner.levers)})"
    return (f"{head}: {_x(seen)} vs the best baseline on the visible workloads (ranking "
            f"timing), {_x(measured)} on all workloads re-measured over interleaved rounds")
