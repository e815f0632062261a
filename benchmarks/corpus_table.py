"""Markdown table of where each problem's baselines sit against the speed of light.

Reads evaluation records (``solforge bench ... --solution reference --json FILE``) and
prints, per problem, over its timed workloads (geomean): the fraction of the speed of light
that eager PyTorch and torch.compile reach (T_SOL / T, 1.0 = at the roofline), the speedup
of torch.compile over eager and its SOL score with eager as the baseline (0.5 = no better
than eager, 1 = at the roofline), the bound of each timed workload, and the verdict of the
reference evaluated as a candidate::

    python benchmarks/corpus_table.py benchmarks/results/2026-12-01-h200/reference_*.json

A problem found in several files keeps the record of the last file named (a later run of
it). Not covered: problems whose record has no timed workload (a failed verdict before timing)
show their status and no figures.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

from solforge.records.evaluation import EvaluationRecord
from solforge.problems import find_builtin
from solforge.sol import sol_score


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def row(rec: EvaluationRecord) -> dict:
    timed = [w for w in rec.workloads if w.sol_ms and (w.eager_ms or w.compile_ms)]
    try:
        category = find_builtin(rec.problem).category
    except Exception:  # a record of a problem no longer in the corpus
        category = "?"
    bounds = Counter(w.bound for w in timed if w.bound)
    return {
        "problem": rec.problem, "category": category, "status": rec.status.value,
        "flags": list(rec.flags), "timed": len(timed),
        "eager_sol": _geomean([w.sol_ms / w.eager_ms for w in timed if w.eager_ms]),
        "compile_sol": _geomean([w.sol_ms / w.compile_ms for w in timed if w.compile_ms]),
        "compile_speedup": _geomean([w.eager_ms / w.compile_ms for w in timed
                                     if w.eager_ms and w.compile_ms]),
        # torch.compile scored with eager as T_b (eager itself scores 0.5 by definition)
        "compile_score_vs_eager": _geomean([
            sol_score(w.compile_ms, w.eager_ms, max(w.sol_ms, w.sol_floor_ms or 0.0))
            for w in timed if w.eager_ms and w.compile_ms]),
        "bounds": ", ".join(f"{n} {b}" for b, n in sorted(bounds.items())),
    }


def table(rows: list[dict]) -> str:
    out = ["| problem | cat. | timed workloads (bound) | eager T_SOL/T | compile T_SOL/T | "
           "compile vs eager | compile SOL score (T_b = eager) | reference as candidate |",
           "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["category"], r["problem"])):
        verdict = r["status"] + (f" ({', '.join(r['flags'])})" if r["flags"] else "")
        out.append(f"| {r['problem']} | {r['category']} | {r['timed']} ({r['bounds']}) | "
                   f"{_fmt(r['eager_sol'])} | {_fmt(r['compile_sol'])} | "
                   f"{_fmt(r['compile_speedup'])}x | {_fmt(r['compile_score_vs_eager'])} | "
                   f"{verdict} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    # a problem in several files keeps the record of the last file named
    by_problem = {r["problem"]: r for f in a.records
                  for r in (row(EvaluationRecord.from_json(d)) for d in json.loads(f.read_text()))}
    rows = list(by_problem.values())
    print(table(rows))
    med = {k: sorted(x for x in (r[k] for r in rows) if x is not None)
           for k in ("eager_sol", "compile_sol", "compile_score_vs_eager")}
    for k, xs in med.items():
        if xs:
            print(f"\n{k}: median {xs[len(xs) // 2]:.2f} over {len(xs)} problems")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
