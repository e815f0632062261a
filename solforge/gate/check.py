"""The CI gate: every kept kernel judged again on fresh seeds and all workloads, timed in
interleaved rounds with fresh baselines, and compared with the reviewed baseline.

A kernel fails the gate when

- its verdict is not PASSED (wrong, crashing, flagged under the policy), or
- it is slower than its baseline beyond the measured noise: ``ratio / baseline ratio - 1``
  (time relative to the best baseline, ``baseline.py``) above the sum of the two
  measurements' spreads (each the interleaved rounds' range over their median, or its
  calls' spread where larger). Each median lies within its rounds' range; a change larger
  than both ranges together is not the rounds' scatter. The threshold is what was measured
  on this runner today and on the day of the baseline, never a fixed percentage.

A kernel with no baseline entry, or whose noise cannot be measured (one round), passes with
a note saying so. The fresh seeds are :func:`~solforge.orchestrate.verify.reverify_overrides`'
(at least ``FRESH_SEEDS`` trials from a random base seed), as a run's final check uses.

Not covered: faster kernels (an improvement passes; ``--update-baseline`` records it after
review), problems absent from the export (``kept.missing``, reported, not failed).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from solforge.bench import Evaluator
from solforge.gate.baseline import CiBaseline, ProblemFigures, figures_of
from solforge.gate.kept import Kept, KeptSet
from solforge.orchestrate.verify import reverify_overrides
from solforge.records import EvalOptions, EvaluationRecord

DEFAULT_ROUNDS = 5   # interleaved rounds per kernel: five give a spread a median sits inside


@dataclass
class Outcome:
    """One kernel's gate result."""

    name: str
    passed: bool
    reason: str
    record: EvaluationRecord
    figures: ProblemFigures | None = None
    base: ProblemFigures | None = None
    slowdown: float | None = None
    noise: float | None = None
    seconds: float = 0.0


@dataclass
class GateReport:
    device: str
    rounds: int
    outcomes: list[Outcome] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)


def measure(kept: KeptSet, options: EvalOptions) -> list[tuple[Kept, EvaluationRecord]]:
    """Judge each kernel once: all workloads, ``options.rounds`` interleaved rounds with
    fresh baselines, fresh seeds."""
    opts = options.model_copy(update={"workloads": "all", "fresh_baselines": True,
                                      "timing": True})
    out = []
    with tempfile.TemporaryDirectory(prefix="solforge-ci-") as tmp, Evaluator(opts) as ev:
        for k in kept.kernels:
            path = Path(tmp) / f"{k.name}.py"
            path.write_text(k.source)
            rec = ev.evaluate(k.problem, path, k.language, **reverify_overrides(opts))
            out.append((k, rec))
    return out


def compare(k: Kept, record: EvaluationRecord, baseline: CiBaseline | None) -> Outcome:
    """The gate's verdict on one measured kernel (see the module docstring)."""
    if not record.passed:
        bad = [w for w in record.workloads if w.status is not None and w.status.value != "PASSED"]
        where = f" (workload {bad[0].name})" if bad and bad[0].name not in record.message \
            else ""
        return Outcome(k.name, False, f"{record.status.value}{where}: "
                       f"{record.message[:400] or 'no message'}", record,
                       seconds=record.duration_s or 0.0)
    now = figures_of(record, k.sha256)
    base = baseline.problems.get(k.name) if baseline else None
    out = Outcome(k.name, True, "", record, figures=now, base=base,
                  seconds=record.duration_s or 0.0)
    if base is None or base.ratio is None:
        out.reason = "correct; no baseline entry (run --update-baseline after review)"
        return out
    if now.ratio is None:
        out.reason = "correct; no timed workload measured in rounds on this device"
        return out
    out.slowdown = now.ratio / base.ratio - 1.0
    if now.spread is None or base.spread is None:
        out.reason = (f"correct; {out.slowdown:+.1%} against the baseline, noise unknown "
                      "(a single round): not gated on speed")
        return out
    out.noise = now.spread + base.spread
    changed = "" if now.source_sha256 == base.source_sha256 else " (source changed)"
    if out.slowdown > out.noise:
        out.passed = False
        out.reason = (f"slower: {out.slowdown:+.1%} relative to the best baseline, beyond the "
                      f"measured noise {out.noise:.1%} (spread now {now.spread:.1%} "
                      f"+ baseline {base.spread:.1%}){changed}")
    else:
        out.reason = (f"correct; {out.slowdown:+.1%} against the baseline, within the "
                      f"measured noise {out.noise:.1%}{changed}")
    return out


def run_gate(kept: KeptSet, options: EvalOptions, baseline: CiBaseline | None) -> GateReport:
    """Measure every kept kernel and compare it with ``baseline`` (None: none yet)."""
    report = GateReport(device=options.device, rounds=options.rounds,
                        missing=dict(kept.missing))
    for k, rec in measure(kept, options):
        report.outcomes.append(compare(k, rec, baseline))
    return report


def updated_baseline(report: GateReport, old: CiBaseline | None) -> CiBaseline:
    """The baseline with every correct kernel's figures of ``report`` (entries of kernels
    not measured now are kept as they were)."""
    problems = dict(old.problems) if old else {}
    for o in report.outcomes:
        if o.record.passed and o.figures is not None:
            problems[o.name] = o.figures
    return CiBaseline(device=report.device, rounds=report.rounds, problems=problems)
