"""The judges' device memory over a run, one row per evaluation, from the run's ledger.

Every evaluation record carries ``judge_memory`` (the judge's idle level when the
evaluation started, its floor, its peak, the device's total use) and, per workload, its
memory plan (estimate, timing input sets, neighbours, seconds waited for room). This
script lists them in the order they finished, from the ledger's ``evalcache`` table (every
evaluation a worker asked for) and ``evaluations`` table (verdicts and re-measurements)::

    python benchmarks/judge_memory.py /tmp/optrun [--json OUT.json]
    python benchmarks/judge_memory.py benchmarks/results/<dir>/optimize_run-callN.tgz

It ends with the figures the memory issue asks for: the spread of each judge's idle level
over its evaluations (flat: a few MiB), how many judges were replaced and why, how many
out-of-memory verdicts there were and whether any came beside other evaluations. Not
covered: evaluations a worker made outside the planner (none in a plain run).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tarfile
import tempfile
from pathlib import Path
from typing import Any


def _ledger(path: Path, tmp: str) -> Path:
    if path.is_dir():
        return path / "ledger.sqlite"
    with tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
    return Path(tmp) / "optrun" / "ledger.sqlite"


def records(db_path: Path) -> list[dict[str, Any]]:
    db = sqlite3.connect(db_path)
    seen: set[str] = set()
    out: list[tuple[float, dict[str, Any]]] = []
    for table, kind in (("evalcache", "'cached'"), ("evaluations", "kind")):
        for created, rec, k in db.execute(f"SELECT created, record, {kind} FROM {table}"):
            r = json.loads(rec)
            key = json.dumps([r.get("problem"), r.get("solution"), r.get("duration_s"),
                              (r.get("judge_memory") or {}).get("idle_before_mb")])
            if key in seen:
                continue
            seen.add(key)
            r["_kind"] = k
            out.append((created or 0.0, r))
    return [r for _, r in sorted(out, key=lambda x: x[0])]


def row(r: dict[str, Any]) -> dict[str, Any]:
    jm = r.get("judge_memory") or {}
    plans = [w.get("memory") or {} for w in r.get("workloads", [])]
    return {"problem": r.get("problem"), "kind": r.get("_kind"), "status": r.get("status"),
            "judge": jm.get("pid"), "idle_before_mb": jm.get("idle_before_mb"),
            "floor_mb": jm.get("floor_mb"), "peak_mb": jm.get("peak_mb"),
            "device_used_mb": jm.get("device_used_mb"),
            "replaced_before": jm.get("replaced_before") or "",
            "retried_alone": bool(r.get("retried_alone")),
            "input_sets": min((p.get("input_sets") or 3 for p in plans), default=None),
            "estimate_mb": max((p.get("estimate_mb") or 0 for p in plans), default=None),
            "waited_s": round(sum(p.get("waited_s") or 0 for p in plans), 2),
            "neighbours": max((p.get("neighbours") or 0 for p in plans), default=0),
            "oom": "out of memory" in (r.get("message") or "").lower()}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_judge: dict[Any, list[float]] = {}
    for x in rows:
        if x["judge"] is not None and x["idle_before_mb"] is not None:
            by_judge.setdefault(x["judge"], []).append(x["idle_before_mb"])
    return {"evaluations": len(rows), "judges": len(by_judge),
            "idle_spread_mb": {str(j): round(max(v) - min(v), 1) for j, v in by_judge.items()},
            "idle_max_mb": max((max(v) for v in by_judge.values()), default=None),
            "peak_max_mb": max((x["peak_mb"] or 0 for x in rows), default=None),
            "replaced": [x["replaced_before"] for x in rows if x["replaced_before"]],
            "retried_alone": sum(x["retried_alone"] for x in rows),
            "out_of_memory_verdicts": [(x["problem"], x["status"]) for x in rows if x["oom"]],
            "reduced_input_sets": sorted({x["problem"] for x in rows
                                          if (x["input_sets"] or 3) < 3})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a run directory or an optimize_run.tgz")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [row(r) for r in records(_ledger(a.run, tmp))]
    print("| # | problem | kind | status | judge | idle MiB | peak MiB | device MiB | sets | "
          "est. MiB | waited s | neighbours |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, x in enumerate(rows):
        print(f"| {i} | {x['problem']} | {x['kind']} | {x['status']} | {x['judge']} | "
              f"{x['idle_before_mb']} | {x['peak_mb']} | {x['device_used_mb']} | "
              f"{x['input_sets']} | {x['estimate_mb']} | {x['waited_s']} | {x['neighbours']} |")
    s = summary(rows)
    print(json.dumps(s, indent=1))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "summary": s}, indent=1))


if __name__ == "__main__":
    main()
