"""The CI gate's baseline file (``solforge.ci-baseline/1``) and the figures it keeps.

What is compared is not a kernel's time but its time *relative to the reference's eager and
torch.compile runs measured in the same interleaved rounds* (``EvalOptions.rounds``: the
candidate and fresh baselines alternate, round after round, in one evaluation): a slower
or faster machine, a warmer GPU, a busier host move both alike and leave the ratio. Per
round, a workload's ratio is candidate time / the faster baseline's time in that round; a
problem's is the geometric mean over its timed workloads. The problem's figure is the
median over rounds, and its noise the rounds' spread, (max - min) / median, or the spread
of the candidate's calls within the rounds ((p75 - p25) / median, the record's
``time_spread``, averaged over workloads) where that is larger: a few rounds of a noisy
host can land close together by chance, its calls cannot.

Not covered: comparing absolute times across machines (a baseline is a property of one
runner: keep one file per runner kind), and workloads timed in a single round (no spread
can be measured: the gate says so and treats their noise as unknown).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from solforge.records import EvaluationRecord
from solforge.records.figures import geomean, median

BASELINE_SCHEMA = "solforge.ci-baseline/1"


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the fix."""


class WorkloadFigures(BaseModel):
    """One workload of one measurement."""

    time_ms: float | None = Field(None, description="the candidate's median kernel time")
    best_baseline_ms: float | None = Field(None, description="the faster baseline's median")
    rounds: list[float] = Field(default_factory=list, description="per round: candidate "
                                "time / the faster baseline's time in that round")


class ProblemFigures(BaseModel):
    """One kept kernel's figures: what the gate compares."""

    source_sha256: str = Field(description="the kernel source measured")
    language: str = "pytorch"
    rounds: list[float] = Field(default_factory=list, description="per round: the geomean "
                                "over timed workloads of their ratios")
    ratio: float | None = Field(None, description="median of rounds: time relative to the "
                                "best baseline (lower is faster)")
    spread: float | None = Field(None, description="the measurement's own noise: the larger "
                                 "of round_spread and call_spread")
    round_spread: float | None = Field(None, description="(max - min) / median of rounds")
    call_spread: float | None = Field(None, description="the mean over timed workloads of "
                                      "the candidate's (p75 - p25) / median of its calls")
    workloads: dict[str, WorkloadFigures] = Field(default_factory=dict)


class CiBaseline(BaseModel):
    """The reviewed figures of every kept kernel, on one kind of runner."""

    schema_: str = Field(BASELINE_SCHEMA, alias="schema")
    device: str = ""
    created: float = Field(default_factory=time.time)
    rounds: int = 0
    problems: dict[str, ProblemFigures] = Field(default_factory=dict)

    model_config = {"populate_by_name": True}


def figures_of(record: EvaluationRecord, source_sha256: str) -> ProblemFigures:
    """The gate's figures of one evaluation with interleaved rounds."""
    per_workload: dict[str, WorkloadFigures] = {}
    for w in record.workloads:
        if not w.time_ms:
            continue
        rounds = []
        for i, cand in enumerate(w.round_ms):
            bases = [r[i] for r in w.round_baseline_ms.values() if i < len(r) and r[i]]
            # a kind timed once (a compile too slow to warm up again) keeps its one figure
            bases += [ms for kind, ms in (("eager", w.eager_ms), ("compile", w.compile_ms))
                      if ms and kind not in w.round_baseline_ms]
            if bases and cand:
                rounds.append(cand / min(bases))
        known = [t for t in (w.eager_ms, w.compile_ms) if t]
        per_workload[w.name] = WorkloadFigures(time_ms=w.time_ms,
                                               best_baseline_ms=min(known) if known else None,
                                               rounds=rounds)
    # workloads with every round measured (a baseline that failed midway has fewer)
    n = max((len(f.rounds) for f in per_workload.values()), default=0)
    full = [f for f in per_workload.values() if len(f.rounds) == n]
    rounds = [g for i in range(n) if (g := geomean([f.rounds[i] for f in full])) is not None]
    ratio = median(rounds)
    round_spread = (max(rounds) - min(rounds)) / ratio if len(rounds) > 1 and ratio else None
    calls = [w.time_spread for w in record.workloads if w.time_ms and w.time_spread is not None]
    call_spread = sum(calls) / len(calls) if calls else None
    spread = None if round_spread is None else max(round_spread, call_spread or 0.0)
    return ProblemFigures(source_sha256=source_sha256, language=record.language,
                          rounds=rounds, ratio=ratio, spread=spread, round_spread=round_spread,
                          call_spread=call_spread, workloads=per_workload)


def read_baseline(path: Path) -> CiBaseline:
    if not path.is_file():
        raise BaselineError(f"{path}: no baseline file; measure one with `solforge ci RUN "
                            f"--baseline {path} --update-baseline` and commit it after review")
    try:
        data = json.loads(path.read_text())
        base = CiBaseline.model_validate(data)
    except (json.JSONDecodeError, ValidationError) as e:
        raise BaselineError(f"{path}: not a {BASELINE_SCHEMA} file ({str(e).splitlines()[0]})"
                            "; write a fresh one with --update-baseline") from None
    if base.schema_ != BASELINE_SCHEMA:
        raise BaselineError(f"{path}: schema {base.schema_!r}, this solforge reads "
                            f"{BASELINE_SCHEMA!r}; write a fresh one with --update-baseline")
    return base


def write_baseline(path: Path, base: CiBaseline) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(base.model_dump_json(by_alias=True, indent=1) + "\n")
