"""What a report shows, read from a run's ledger (or an export) into plain data: the suite
summary, one :class:`ProblemView` per problem (the kept kernel, its reference, its record,
its levers and reasoning), the best-so-far timeline, agent and token usage, and the
device ceilings the roofline is drawn against.

The kept kernel of a problem is the ledger's ``best`` (a re-measured ``final`` verdict if
any, else ``full``); a problem with none shows its latest verdict, as ``runs show`` does.

Not covered: drawing (``figures.py``) and HTML (``page.py``); runs of several devices (the
first device with timed workloads names the ceilings); comparing two runs.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solforge.orchestrate.locate import Located
from solforge.orchestrate.run import Run
from solforge.records import EvaluationRecord, speedup_vs_best
from solforge.records.figures import geomean
from solforge.sol import DeviceProfile, load_profile, summarize
from solforge.sol.profile import read_profile


@dataclass
class ProblemView:
    """One problem's page."""

    name: str
    category: str = ""
    state: str = ""
    record: EvaluationRecord | None = None
    kept: bool = False                 # the record is a passing kept verdict (ledger best)
    kind: str = ""                     # final / full / visible
    attempt: dict[str, Any] | None = None
    reference_source: str = ""
    reference_from: str = ""
    attempts: int = 0

    @property
    def anchor(self) -> str:
        return "p-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in self.name)

    @property
    def speedup_vs_best(self) -> float | None:
        return speedup_vs_best(self.record) if self.record and self.record.passed else None


@dataclass
class RunView:
    """Everything a report page and the dashboard show."""

    title: str
    status: str
    agent: str
    device: str
    summary: dict[str, Any]
    problems: list[ProblemView]
    timeline: list[dict[str, Any]] = field(default_factory=list)
    usage: list[dict[str, Any]] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    evaluations: int = 0
    profile: DeviceProfile | None = None
    profile_note: str = ""
    generated: float = field(default_factory=time.time)

    def progress(self) -> dict[str, Any]:
        """The few figures that say how far a run is (the dashboard's ``/api/progress``)."""
        states: dict[str, int] = {}
        for p in self.problems:
            states[p.state or "exported"] = states.get(p.state or "exported", 0) + 1
        return {"status": self.status, "evaluations": self.evaluations,
                "problems": len(self.problems), "states": states,
                "passed": sum(1 for p in self.problems if p.kept),
                "geomean_speedup_vs_best": self.summary.get("geomean_speedup_vs_best"),
                "timeline_points": len(self.timeline)}


def build_view(located: Located, profile_path: Path | None = None) -> RunView:
    """The view of a located run (its ledger read-only) or, without a run, of an export."""
    if located.run_dir is not None:
        view = _from_run(Run.open(located.run_dir, readonly=True), located.export_dir)
        view.title = str(located.given)
    else:
        assert located.export_dir is not None
        view = _from_export(located.export_dir, str(located.given))
    view.profile, view.profile_note = _ceilings(view, profile_path)
    for page in view.problems:
        if page.reference_from and not page.reference_from.startswith("built-in"):
            page.reference_from = located.describe(page.reference_from)
    return view


# -- from a run ------------------------------------------------------------------------

def _from_run(run: Run, export_dir: Path | None) -> RunView:
    led = run.ledger
    pages = []
    for p in led.problems():
        best = led.best(p["name"])
        kept = best is not None
        if best is None:
            every = led.evaluations(p["name"])
            verdicts = [e for e in every if e["kind"] in ("final", "full")]
            best = (verdicts or every or [None])[-1]
        record = EvaluationRecord.from_json(best["record"]) if best else None
        att = led.attempt(best["attempt"]) if best and best.get("attempt") else None
        ref, where = _reference(p["name"], p.get("path") or "", export_dir)
        pages.append(ProblemView(
            name=p["name"], category=p.get("category") or "", state=p["state"],
            record=record, kept=kept, kind=best["kind"] if best else "", attempt=att,
            reference_source=ref, reference_from=where,
            attempts=len(led.attempts(p["name"]))))
    spec = run.spec
    summary = run.summary() or {}
    return RunView(title=str(run.dir), status=run.status(), agent=spec.agent,
                   device=summary.get("device") or spec.device, summary=summary,
                   problems=pages, timeline=_timeline(run), usage=led.usage_rows(),
                   workers=_workers(run), evaluations=led.count_evaluations())


def _timeline(run: Run) -> list[dict[str, Any]]:
    """Best so far, one point per verdict that improved a problem: minutes since the run
    began, the suite geomean against the best baseline (a problem with no passing verdict
    yet counts 1.0x, as the summary counts a failed one), problems with a passing verdict.
    Attempts whose ``final`` check failed are left out, as the ledger's ``best`` leaves
    them out."""
    led = run.ledger
    names = [p["name"] for p in led.problems()]
    rows = [e for e in led.evaluations() if e["kind"] in ("full", "final")]
    rejected = {e["attempt"] for e in rows if e["kind"] == "final" and e["status"] != "PASSED"}
    start = min([run.spec.created, *(e["created"] for e in rows)]) if rows else run.spec.created
    best: dict[str, float] = {}
    out = []
    for e in rows:
        sp = e["speedup_vs_best"]
        if e["status"] != "PASSED" or sp is None or e["attempt"] in rejected:
            continue
        if sp <= best.get(e["problem"], 0.0):
            continue
        best[e["problem"]] = sp
        out.append({"minutes": (e["created"] - start) / 60.0, "problem": e["problem"],
                    "speedup_vs_best": sp,
                    "geomean_speedup_vs_best": geomean([best.get(n, 1.0) for n in names]),
                    "passed": len(best)})
    return out


def _workers(run: Run) -> list[dict[str, Any]]:
    """Per worker: agent, attempts, work units done and failed, seconds in units."""
    led = run.ledger
    acc: dict[str, dict[str, Any]] = {}
    for a in led.attempts():
        w = acc.setdefault(a["worker"] or "-", {"worker": a["worker"] or "-", "agents": set(),
                                                "attempts": 0, "units_done": 0,
                                                "units_failed": 0, "unit_seconds": 0.0})
        w["attempts"] += 1
        w["agents"].add(a["agent"] or "-")
    for u in led.work():
        w = acc.setdefault(u["worker"] or "-", {"worker": u["worker"] or "-", "agents": set(),
                                                "attempts": 0, "units_done": 0,
                                                "units_failed": 0, "unit_seconds": 0.0})
        if u["state"] == "done":
            w["units_done"] += 1
        elif u["state"] == "failed":
            w["units_failed"] += 1
        if u["started"] and u["finished"]:
            w["unit_seconds"] += max(0.0, u["finished"] - u["started"])
    return [w | {"agents": ", ".join(sorted(w["agents"]))} for w in acc.values()]


# -- from an export ----------------------------------------------------------------------

def _from_export(export_dir: Path, title: str) -> RunView:
    pages = []
    for rec_path in sorted((export_dir / "records").glob("*.json")):
        record = EvaluationRecord.from_json(json.loads(rec_path.read_text()))
        name = rec_path.stem
        sol = export_dir / "solutions" / f"{name}.py"
        ref, where = _reference(name, "", export_dir)
        att = {"source": sol.read_text() if sol.is_file() else "", "language": record.language,
               "agent": "", "levers": [], "reasoning": ""}
        pages.append(ProblemView(name=name, record=record, kept=record.passed, kind="export",
                                 attempt=att, reference_source=ref, reference_from=where))
    records = [p.record for p in pages if p.record is not None]
    devices = [r.device for r in records if r.workloads]
    device = devices[0] if devices else "cpu"
    summary = summarize(records, device=device) if records else {}
    try:  # the gain per lever needs the ledger's levers: the export's summary kept them
        summary["levers"] = json.loads((export_dir / "summary.json").read_text())["levers"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return RunView(title=title, status="exported", agent="", device=device, summary=summary,
                   problems=pages)


# -- shared ------------------------------------------------------------------------------

def _reference(name: str, path: str, export_dir: Path | None) -> tuple[str, str]:
    """The reference's source and where it was read: the export beside the run (the copy
    made with the run), the recorded path, or the built-in corpus by name."""
    candidates = [export_dir / "problems" / f"{name}.py"] if export_dir is not None else []
    if path:
        candidates.append(Path(path))
    for c in candidates:
        if c.is_file():
            return c.read_text(), str(c)
    found = _builtin_path(name)
    if found is not None:
        return found.read_text(), f"built-in corpus ({found})"
    return "", ""


@functools.cache
def _builtin_path(name: str) -> Path | None:
    from solforge.problems.loader import find_builtin

    problem = find_builtin(name)
    return Path(problem.path) if problem is not None and Path(problem.path).is_file() else None


def _ceilings(view: RunView, profile_path: Path | None) -> tuple[DeviceProfile | None, str]:
    """The device profile the roofline is drawn against, and a sentence saying whence."""
    if profile_path is not None:
        p = read_profile(profile_path)
        return p, f"{p.source} ceilings of {p.name} from {profile_path}" + (
            f" (measured {p.measured_at:%Y-%m-%d}, torch {p.torch_version})"
            if p.measured_at else "")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            p = load_profile(view.device)
        except RuntimeError:
            p = None
    if p is None:
        return None, (f"no ceilings known for {view.device!r} on this machine: pass "
                      "--profile FILE (a `solforge calibrate` profile) to draw them")
    how = (f"calibrated on this machine {p.measured_at:%Y-%m-%d}" if p.source == "calibrated"
           and p.measured_at else "datasheet figures (solforge/sol/devices.py)")
    return p, f"ceilings of {p.name}: {how}"
