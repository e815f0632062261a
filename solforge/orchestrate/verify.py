"""A run's final verification: each problem's winner judged once more, on every workload,
in a fresh runner, interleaved with fresh baselines, before the run reports.

Not covered: choosing the winner (the ledger's ``best``), or re-measuring a winner whose
best verdict already is such a re-measurement (kind ``final``, as the search agent's are).
"""

from __future__ import annotations

from collections.abc import Callable

from solforge.bench.evaluator import Evaluator
from solforge.bench.options import EvalOptions
from solforge.orchestrate.run import Run
from solforge.problems.spec import Problem


def final_verification(run: Run, problems: dict[str, Problem], options: EvalOptions,
                       rounds: int, on_verified: Callable[[str], None] | None = None
                       ) -> int:
    """Evaluate each pending winner with ``rounds`` interleaved rounds on all workloads and
    record it as kind ``final``; ``on_verified(name)`` after each. Returns how many were
    evaluated."""
    led = run.ledger
    pending = []
    for name in problems:
        best = led.best(name)
        if best is not None and best["kind"] != "final" and best.get("attempt"):
            pending.append((name, best["attempt"]))
    if not pending:
        return 0
    opts = options.model_copy(update={"rounds": rounds, "workloads": "all"})
    done = 0
    with Evaluator(opts) as ev:
        for name, attempt in pending:
            att = led.attempt(attempt)
            if att is None:
                continue
            path = run.solution_path(name, f"final-{attempt}")
            path.write_text(att["source"])
            rec = ev.evaluate(problems[name], path, att["language"])
            led.add_evaluation(name, rec.to_json(), kind="final", attempt=attempt)
            led.event("final_verification", problem=name, attempt=attempt,
                      status=rec.status.value)
            done += 1
            if on_verified is not None:
                on_verified(name)
    return done
