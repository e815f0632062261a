"""Markdown table of a search run: per problem, the kept solution's candidate, its levers
and its figures (the winner's ``final`` evaluation, as ``solforge export`` reports them).

Reads a run directory, or an ``optimize_run.tgz`` that ``benchmarks/gpu/session.sh``
packed (unpacked to a temporary directory)::

    python benchmarks/search_table.py benchmarks/results/2026-12-02-h200-s7/optimize_run-call3.tgz

Rows are sorted by speedup against the best baseline; problems without a kept solution
show their state (``queued``: never started; a failed verdict: its status). Not covered:
runs of the LLM agents (their attempts have no candidate name; the path is shown).
"""

from __future__ import annotations

import argparse
import tarfile
import tempfile
from pathlib import Path

from solforge.records import speedup_vs_best
from solforge.orchestrate.run import Run


def _open(path: Path, tmp: str) -> Run:
    if path.is_dir():
        return Run.open(path)
    with tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
    return Run.open(Path(tmp) / "optrun")


def _x(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def rows(run: Run) -> list[tuple[float, str]]:
    out = []
    for p in run.show()["problems"]:
        best, aid = p["best"], p.get("best_attempt")
        att = run.ledger.attempt(aid) if aid else None
        name = (att or {}).get("path") or ""
        name = name.removeprefix("candidate:") if name.startswith("candidate:") else name
        levers = ", ".join((att or {}).get("levers") or []) or "none"
        if best is None or best.get("status") != "PASSED":
            status = best.get("status") if best else p["state"]
            out.append((-1.0, f"| `{p['name']}` | {p['attempts']} | {status} | | | | | |"))
            continue
        vb = speedup_vs_best(best)
        out.append((vb or 0.0, f"| `{p['name']}` | {p['attempts']} | `{name}` | {levers} | "
                               f"{_x(best.get('speedup_vs_eager'))} | "
                               f"{_x(best.get('speedup_vs_compile'))} | {_x(vb)} | "
                               f"{_x(best.get('sol_score'))} |"))
    return sorted(out, key=lambda r: -r[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="run directory or optimize_run.tgz")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = _open(args.run, tmp)
        print("| problem | attempts | kept | levers | vs eager | vs compile | vs best | SOL |")
        print("|---|---|---|---|---|---|---|---|")
        for _, line in rows(run):
            print(line)


if __name__ == "__main__":
    main()
