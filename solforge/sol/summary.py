"""Suite metrics over evaluation records: pass rate, speedup geomeans, fast_p, SOL scores.

Conventions, from the published anchors:

- A failed problem counts as 1.0x in the speedup geomeans (as published agent results do);
  the ``*_correct`` geomeans are over passed problems only.
- ``speedup_vs_best`` of a record = geomean over its workloads of min(eager, compile) / time.
- fast_p (KernelBench): the fraction of *all* problems that are correct AND faster than the
  baseline by more than p (speedup > p).
- SOL scores are recomputed per workload against the chosen baseline (the stored times make
  that possible), then per problem as the geomean over workloads; a failed problem scores 0.
  The median and mean are over problems whose SOL is known.

Not covered: several records of one problem (pick one per problem first: a duplicate is an
error), confidence intervals, and weighting problems by category.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from solforge.records.evaluation import EvaluationRecord, speedup_vs_best
from solforge.records.figures import geomean, median
from solforge.sol.annotate import BASELINES, Baseline, baseline_time, workload_score
from solforge.sol.profile import load_profile

SUMMARY_SCHEMA = "solforge.summary/1"


def record_sol_score(record: EvaluationRecord, baseline: Baseline = "best",
                     llc_bytes: int | None = None) -> float | None:
    """A problem's SOL score against ``baseline``: 0 if it failed, else the geomean over its
    timed workloads (None if none was timed, or if a timed workload's SOL or times are
    unknown)."""
    if not record.passed:
        return 0.0
    # workloads run for correctness only (the small CPU ones on a GPU) have no time to score
    timed = [w for w in record.workloads if w.time_ms is not None]
    scores = [workload_score(w, baseline_time(w, baseline), llc_bytes) for w in timed]
    if not scores or any(s is None for s in scores):
        return None
    return geomean(scores)


def summarize(records: list[EvaluationRecord], device: str, agent: str | None = None,
              baseline: str | Mapping[str, Mapping[str, float]] = "best") -> dict[str, Any]:
    """The suite summary (schema ``solforge.summary/1``) of one record per problem.

    ``baseline`` is 'eager', 'compile', 'best', or stored times ``{problem: {workload: ms}}``;
    it decides the SOL scores (the speedups are always reported against all three).
    """
    names = [r.problem for r in records]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"summarize takes one record per problem; several for {duplicates}")
    if isinstance(baseline, str) and baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; use one of {BASELINES} or stored "
                         f"times {{problem: {{workload: ms}}}}")
    # the cache size only matters for the faster-than-light check, so only where SOL is known
    has_sol = any(w.sol_ms is not None for r in records for w in r.workloads)
    try:
        profile = load_profile(device) if has_sol else None
    except RuntimeError:  # 'cuda' named on a machine without one: the label is all we have
        profile = None
    llc = profile.llc_bytes if profile else None

    n = len(records)
    passed = [r for r in records if r.passed]
    per: dict[str, list[float | None]] = {"eager": [], "compile": [], "best": []}
    correct: dict[str, list[float | None]] = {"eager": [], "compile": [], "best": []}
    fast = {"eager": 0, "compile": 0, "best": 0}
    thresholds = {"eager": 1.0, "compile": 1.0, "best": 2.0}
    sol_scores: list[float] = []
    for r in records:
        speedups = {"eager": r.speedup_vs_eager, "compile": r.speedup_vs_compile,
                    "best": speedup_vs_best(r)}
        for key, s in speedups.items():
            per[key].append(s if r.passed else 1.0)
            if r.passed:
                correct[key].append(s)
                fast[key] += int(s is not None and s > thresholds[key])
        b = baseline.get(r.problem, {}) if isinstance(baseline, Mapping) else baseline
        score = record_sol_score(r, b, llc)
        if score is not None:
            sol_scores.append(score)

    summary: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "device": device,
        "agent": agent,
        "baseline": "stored" if isinstance(baseline, Mapping) else baseline,
        "problems": n,
        "passed": len(passed),
        "pass_rate": len(passed) / n if n else None,
        "geomean_speedup_vs_eager": geomean(per["eager"]),
        "geomean_speedup_vs_compile": geomean(per["compile"]),
        "geomean_speedup_vs_best": geomean(per["best"]),
        "fast_1_vs_eager": fast["eager"] / n if n else None,
        "fast_1_vs_compile": fast["compile"] / n if n else None,
        "fast_2_vs_best": fast["best"] / n if n else None,
        "sol_score_median": median(sol_scores),
        "sol_score_mean": statistics.fmean(sol_scores) if sol_scores else None,
    }
    for key in ("eager", "compile", "best"):
        summary[f"geomean_speedup_vs_{key}_correct"] = geomean(correct[key])
    return summary
