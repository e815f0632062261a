"""The run: a directory that holds one optimisation campaign and survives a crash.

::

    RUN/
      ledger.sqlite          every problem, attempt, evaluation, work unit, usage, event
      spec.json              what was asked (agent, targets, options, budgets): replayable
      solutions/<problem>/<attempt>.py    every candidate's source, as evaluated
      trajectories/<worker>-<problem>.jsonl   LLM agents' step-by-step logs

``solforge runs show RUN`` reads it; ``solforge export RUN --out OUT`` writes the best
solution per problem with its record and the suite summary; ``solforge optimize --resume
RUN`` continues it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from solforge.orchestrate.ledger import Ledger


class RunSpec(BaseModel):
    """What a run was asked to do; enough to re-create it."""

    agent: str = "search"
    targets: list[str] = Field(default_factory=lambda: ["all"])
    device: str = "cpu"
    options: dict[str, Any] = Field(default_factory=dict)
    budgets: dict[str, Any] = Field(default_factory=dict)
    workers: int = 1
    created: float = Field(default_factory=time.time)


def default_run_dir(root: Path | None = None) -> Path:
    root = root or Path("runs")
    return root / time.strftime("%Y%m%d-%H%M%S")


class Run:
    def __init__(self, directory: Path, readonly: bool = False) -> None:
        self.dir = Path(directory)
        self.ledger = Ledger(self.dir / "ledger.sqlite", readonly=readonly)

    @classmethod
    def create(cls, directory: Path | None, spec: RunSpec) -> Run:
        d = Path(directory) if directory else default_run_dir()
        if (d / "ledger.sqlite").exists():
            raise FileExistsError(f"{d} already holds a run; use --resume {d} to continue it "
                                  "or pick another --run-dir")
        d.mkdir(parents=True, exist_ok=True)
        (d / "spec.json").write_text(spec.model_dump_json(indent=1))
        run = cls(d)
        run.ledger.set_meta("spec", spec.model_dump_json())
        run.mark("running")
        return run

    @classmethod
    def open(cls, directory: Path, readonly: bool = False) -> Run:
        """An existing run; ``readonly``: its ledger opened so that nothing can be written."""
        d = Path(directory)
        if not (d / "ledger.sqlite").exists():
            raise FileNotFoundError(f"{d}: not a solforge run (no ledger.sqlite)")
        return cls(d, readonly=readonly)

    @property
    def spec(self) -> RunSpec:
        return RunSpec.model_validate_json(self.ledger.get_meta("spec") or "{}")

    def mark(self, status: str) -> None:
        self.ledger.set_meta("status", status)
        self.ledger.set_meta("owner", json.dumps({"pid": os.getpid(),
                                                  "host": socket.gethostname(),
                                                  "ts": time.time()}))

    def status(self) -> str:
        """finished / stopped / running / interrupted (its owner died without saying)."""
        status = self.ledger.get_meta("status", "unknown")
        if status == "running":
            try:
                owner = json.loads(self.ledger.get_meta("owner") or "{}")
            except json.JSONDecodeError:
                owner = {}
            if owner.get("host") == socket.gethostname() and owner.get("pid"):
                try:
                    os.kill(int(owner["pid"]), 0)
                except ProcessLookupError:
                    return "interrupted"
                except PermissionError:
                    pass
        return status

    def solution_path(self, problem: str, attempt: int | str) -> Path:
        p = self.dir / "solutions" / problem / f"{attempt}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def trajectory_path(self, worker: str, problem: str) -> Path:
        p = self.dir / "trajectories" / f"{worker}-{problem}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    # -- reading -----------------------------------------------------------------------
    def show(self) -> dict[str, Any]:
        led = self.ledger
        problems = []
        for p in led.problems():
            best = led.best(p["name"])
            problems.append({
                "name": p["name"], "state": p["state"],
                "attempts": len(led.attempts(p["name"])),
                "best": best["record"] if best else None,
                "best_attempt": best["attempt"] if best else None,
            })
        return {"status": self.status(), "dir": str(self.dir), "agent": self.spec.agent,
                "evaluations": led.count_evaluations(), "usage": led.usage_totals(),
                "problems": problems}

    def verdicts(self, skip: set[str] | frozenset[str] = frozenset()) -> list[Any]:
        """One record per problem of the run (but those in ``skip``): its best passing
        verdict, else its latest verdict (``final``: the search worker's, the planner's
        re-measurement; ``full``: an LLM worker's), else its latest evaluation, else a
        record saying there is none (so summaries count it as failed)."""
        from solforge.records.evaluation import EvaluationRecord, Status

        out = []
        for p in self.ledger.problems():
            if p["name"] in skip:
                continue
            best = self.ledger.best(p["name"])
            if best is None:
                every = self.ledger.evaluations(p["name"])
                verdicts = [e for e in every if e["kind"] in ("final", "full")]
                best = (verdicts or every or [None])[-1]
            if best is not None:
                out.append(EvaluationRecord.from_json(best["record"]))
            else:
                out.append(EvaluationRecord(problem=p["name"], solution="",
                                            device=self.spec.device,
                                            status=Status.RUNTIME_ERROR,
                                            message="no verdict in this run"))
        return out

    def not_reached(self) -> list[str]:
        """The problems no verdict judged yet: with no ``final`` or ``full`` evaluation and
        still ``pending`` (never started, or only surveyed: their reference judged on the
        visible workloads before the run's budget ended) or ``active`` (a unit running, or
        one a killed run left running). A resumed run goes on with them; a problem whose
        search ended without a verdict (``failed``, ``exhausted``) is not among them."""
        judged = self.ledger.judged(("final", "full"))
        return [p["name"] for p in self.ledger.problems()
                if p["state"] in ("pending", "active") and p["name"] not in judged]

    def summary(self) -> dict[str, Any] | None:
        """The run's ``solforge.summary/1`` over the problems that reached a verdict (failed
        ones count 1.0x), with the gain per lever, ``cut_short`` (the problems whose search
        the run's own budget ended early, state ``stopped``) and ``not_reached`` (the
        problems the budget ended before any unit: :meth:`not_reached`; counted nowhere
        else: a surveyed reference is not a verdict, and a problem never tried is not a
        failure), and ``judge_builds`` (verdicts per judge code, ``judge/build.py``). A
        resumed run goes on with both kinds."""
        try:
            from solforge.sol import summarize
        except ImportError:
            return None
        left = set(self.not_reached())
        records = self.verdicts(skip=left)  # their records are not read
        devices = [r.device for r in records if r.workloads]
        summary = summarize(records, device=devices[0] if devices else self.spec.device,
                            agent=self.spec.agent)
        summary["levers"] = self.lever_gains()
        summary["cut_short"] = [p["name"] for p in self.ledger.problems()
                                if p["state"] == "stopped"]
        summary["not_reached"] = sorted(left)
        # which judge code made each verdict (judge/build.py): more than one means a run
        # resumed across solforge versions whose problems not reopened kept older verdicts
        # (a record with neither workloads nor a judge is a problem with no verdict)
        summary["judge_builds"] = dict(Counter(
            r.versions.get("solforge", "unknown") for r in records
            if r.workloads or "solforge" in r.versions))
        return summary

    def lever_gains(self) -> dict[str, dict[str, Any]]:
        """Per lever (fusion, library kernel, precision, graphs, autotuning, ...): how many
        problems' kept solutions use it, and the geometric mean of their speedups over the
        best baseline. A solution with several levers counts for each of them."""
        import math

        acc: dict[str, list[float]] = {}
        for p in self.ledger.problems():
            best = self.ledger.best(p["name"])
            att = self.ledger.attempt(best["attempt"]) if best and best.get("attempt") else None
            if att is None:
                continue
            sp = best.get("speedup_vs_best")
            for lever in att["levers"] or ["none"]:
                acc.setdefault(lever, [])
                if sp:
                    acc[lever].append(sp)
        return {lever: {"problems": len(xs),
                        "geomean_speedup_vs_best": (math.exp(sum(map(math.log, xs)) / len(xs))
                                                    if xs else None)}
                for lever, xs in sorted(acc.items())}

    def export(self, out: Path) -> dict[str, Any]:
        """Best solution per problem (KernelBench format), its record, the reference, and
        the suite summary (``solforge.summary/1``, over every problem of the run)."""
        out = Path(out)
        for sub in ("solutions", "records", "problems"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        exported = []
        for p in self.ledger.problems():
            best = self.ledger.best(p["name"])
            if best is None:
                continue
            att = self.ledger.attempt(best["attempt"]) if best["attempt"] else None
            if att is None:
                continue
            (out / "solutions" / f"{p['name']}.py").write_text(att["source"])
            (out / "records" / f"{p['name']}.json").write_text(json.dumps(best["record"],
                                                                          indent=1))
            if p["path"] and Path(p["path"]).is_file():
                shutil.copyfile(p["path"], out / "problems" / f"{p['name']}.py")
            exported.append(p["name"])
        summary = self.summary()
        if summary is not None:
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
        return {"exported": exported, "summary": summary}
