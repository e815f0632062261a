"""One judge's CPU per evaluation: the same small problem judged N times on one CPU
evaluator, with the CPU the judge and its children (zygote, runners) used in all.

    python benchmarks/judge_cpu.py [--problem tests/fixtures/problems/tiny_linear.py] [-n 10]

Run it from the root of the tree being measured, with that tree on ``PYTHONPATH``: the
judge is started with ``python -m`` in the caller's working directory, and it refuses to
judge when the solforge it imports is not the caller's.

The children's CPU is read from ``getrusage(RUSAGE_CHILDREN)`` once the evaluator has
closed (the judge has reaped its zygote and runners by then, and this process its judge).
It is the per-evaluation overhead of the evaluator itself on a problem whose own work is
a few milliseconds: a CPU figure, for comparing two trees on one machine, alternated.
Not covered: GPU evaluations (their runners are exec'd, not forked), the caller's own
CPU beyond this process (printed separately), and anything that varies with the problem.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from solforge.bench.evaluator import Evaluator
from solforge.bench.judge.reference_solution import reference_solution
from solforge.problems import load_problem
from solforge.records.options import EvalOptions

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default=str(ROOT / "tests/fixtures/problems/tiny_linear.py"))
    ap.add_argument("-n", type=int, default=10, help="evaluations on the one judge")
    a = ap.parse_args()
    problem = load_problem(Path(a.problem))
    opts = EvalOptions(device="cpu", baselines=["eager"], budget_ms=40, timeout_s=60,
                       trials=2, seed=1)
    t0 = time.monotonic()
    with Evaluator(opts) as ev:
        statuses = [ev.evaluate(problem, reference_solution(problem)).status.value
                    for _ in range(a.n)]
    wall = time.monotonic() - t0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"evaluations": a.n, "statuses": sorted(set(statuses)),
                      "wall_s": round(wall, 2),
                      "judge_and_children_cpu_s": round(kids.ru_utime + kids.ru_stime, 2),
                      "caller_cpu_s": round(own.ru_utime + own.ru_stime, 2)}))


if __name__ == "__main__":
    main()
