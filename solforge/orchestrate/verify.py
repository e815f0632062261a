"""A run's final verification: each problem's winner judged once more, on every workload,
in a fresh runner, interleaved with fresh baselines, on at least :data:`FRESH_SEEDS` fresh
seeds, before the run reports.

Fresh seeds: a verdict that depends on the seed is not a verdict (a winner judged on one
fixed set of seeds can fail on another: benchmarks/results/2026-12-02-h200-s10). A
winner's last check therefore runs at least ten correctness trials, each with its own seed
and fresh inputs, from a random base seed that is not the exploration's
(:func:`reverify_overrides`; the search agent's verdict uses it too). A winner that fails is not the winner any more (the
ledger's ``best`` skips an attempt whose ``final`` failed): the next best is verified in
turn, until one passes or none is left, and each verdict is an event
(``final_verification``; ``winner_rejected`` says why one was dropped and what replaced it).

Not covered: choosing the winner (the ledger's ``best``), or judging again a winner whose
best verdict already is such a check (kind ``final`` on enough seeds, as the search agent's
are).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from solforge.bench import Evaluator
from solforge.orchestrate.run import Run
from solforge.problems.spec import Problem
from solforge.records.evaluation import EvaluationRecord
from solforge.records.options import EvalOptions

# correctness trials of a winner's final check, at least: ten seeds of a CPU-sized workload
# cost well under a second; the evaluation's own trial count applies when it is larger
FRESH_SEEDS = 10


def reverify_overrides(options: EvalOptions) -> dict[str, Any]:
    """The :class:`EvalOptions` changes of a winner's final check: at least
    :data:`FRESH_SEEDS` trials from a random base seed (not ``options.seed``, which the
    exploration used)."""
    seed = random.SystemRandom().randrange(1, 2**31)
    while seed == options.seed:
        seed = random.SystemRandom().randrange(1, 2**31)
    return {"trials": max(options.trials, FRESH_SEEDS), "seed": seed}


def reverified(record: EvaluationRecord | dict[str, Any]) -> bool:
    """True for a passing verdict whose every workload passed at least
    :data:`FRESH_SEEDS` correctness trials."""
    rec = record if isinstance(record, EvaluationRecord) else EvaluationRecord.from_json(record)
    return rec.passed and all(w.trials >= FRESH_SEEDS for w in rec.workloads)


def _pending(run: Run, name: str) -> dict[str, Any] | None:
    """The problem's best verdict when it still needs its final check, else None."""
    best = run.ledger.best(name)
    if best is None or not best.get("attempt"):
        return None
    if best["kind"] == "final" and reverified(best["record"]):
        return None
    return best


def final_verification(run: Run, problems: dict[str, Problem], options: EvalOptions,
                       rounds: int, on_verified: Callable[[str], None] | None = None,
                       make_evaluator: Callable[[EvalOptions], Any] = Evaluator) -> int:
    """Evaluate each problem's winner with ``rounds`` interleaved rounds on all workloads and
    :data:`FRESH_SEEDS` fresh seeds, recorded as kind ``final``; where it fails, the next
    best in turn. ``on_verified(name)`` after each problem that was checked;
    ``make_evaluator(options)`` gives the evaluator (the planner's backend's). Returns how
    many evaluations ran."""
    led = run.ledger
    opts = options.model_copy(update={"rounds": rounds, "workloads": "all"})
    done = 0
    with ExitStack() as stack:
        ev: Any = None
        for name, problem in problems.items():
            checked: set[int] = set()
            while (best := _pending(run, name)) is not None:
                attempt = int(best["attempt"])
                att = led.attempt(attempt)
                # a passing fresh verdict ends the loop; one seen again is not checked twice
                if att is None or attempt in checked:
                    break
                checked.add(attempt)
                if ev is None:
                    ev = stack.enter_context(make_evaluator(opts))
                fresh = reverify_overrides(opts)
                path = run.solution_path(name, f"final-{attempt}")
                path.write_text(att["source"])
                rec = ev.evaluate(problem, path, att["language"], **fresh)
                led.add_evaluation(name, rec.to_json(), kind="final", attempt=attempt)
                led.event("final_verification", problem=name, attempt=attempt,
                          status=rec.status.value, seed=fresh["seed"],
                          trials=fresh["trials"], message=rec.message[:300])
                done += 1
                if not rec.passed:
                    after = led.best(name)
                    led.event("winner_rejected", problem=name, attempt=attempt,
                              message=f"failed its final check on fresh seeds: "
                                      f"{rec.message[:300]}",
                              next_attempt=after["attempt"] if after else None)
            if checked and on_verified is not None:
                on_verified(name)
    return done
