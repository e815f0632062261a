"""Compile baselines too slow to warm up again for a re-measurement.

A re-measurement (``rounds`` > 1) times fresh baselines round by round beside the
candidate, so each compiles the reference again, inside the device's slot. Most compile
in seconds; one that ``torch.compile`` recompiles per input set (a Python loop over a
batch of lengths) takes tens of seconds per workload (``benchmarks/results/2026-12-02-h200-s7``).
So the judge remembers, per workload, how long a
compile baseline's warm-up took and the figure it last measured; a re-measurement reuses
that figure instead of compiling again when the warm-up took more than
:data:`FRESH_WARMUP_MAX_S`, and says so in the record.

Not covered: a reused figure was measured earlier, in another process, not interleaved
with the candidate (the eager baseline still is); ``--fresh-baselines`` compiles again
whatever the warm-up cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from solforge.bench.baselines.cache import (
    BaselineCache,
    cached_entries,
    label,
    workload_key,
)
from solforge.records import EvalOptions, WorkloadResult

if TYPE_CHECKING:
    from solforge.problems.spec import Problem, Workload

FRESH_WARMUP_MAX_S = 30.0  # a compile baseline's warm-up past this is not repeated


def _key(problem: Problem, w: Workload, opts: EvalOptions, name: str) -> str:
    # like the unavailable verdicts: a property of the reference, the device and the
    # libraries, not of a timing configuration
    return workload_key(problem, w, opts, name, {"warmup": True})


def remember(problem: Problem, w: Workload, opts: EvalOptions, name: str,
             warmup_s: float | None = None, figure: dict[str, Any] | None = None) -> None:
    """Record a compile baseline's warm-up seconds and/or its latest figure."""
    cache = BaselineCache()
    try:
        key = _key(problem, w, opts, name)
        entry = cache.get(key) or {}
        if warmup_s is not None:
            entry["warmup_s"] = round(warmup_s, 3)
        if figure is not None:
            entry["figure"] = {k: figure.get(k) for k in ("kernel_ms", "latency_ms", "host_ms")}
        cache.put(key, entry)
    finally:
        cache.close()


def too_slow(problem: Problem, w: Workload, opts: EvalOptions) -> dict[str, dict[str, Any]]:
    """The compile kinds of ``opts`` whose warm-up took more than
    :data:`FRESH_WARMUP_MAX_S` and that have a figure to reuse, with their cache entry
    (empty under ``--fresh-baselines``)."""
    if opts.fresh_baselines:
        return {}
    found = cached_entries(opts, lambda name: _key(problem, w, opts, name))
    return {kind: entry for kind, entry in found.items()
            if kind != "eager" and entry.get("figure")
            and entry.get("warmup_s", 0.0) > FRESH_WARMUP_MAX_S}


def reuse(res: WorkloadResult, opts: EvalOptions, slow: dict[str, dict[str, Any]],
          base: dict[str, dict]) -> dict[str, dict]:
    """``base`` with the reused figures of ``slow`` added, and the record's compile time
    and note filled in."""
    out = dict(base)
    for kind, entry in slow.items():
        if kind in out:
            continue
        out[kind] = dict(entry["figure"])
        res.compile_ms = out[kind]["kernel_ms"]
        res.note(f"{label(kind, opts)} baseline from an earlier measurement: its "
                 f"warm-up took {entry['warmup_s']:.0f} s (over {FRESH_WARMUP_MAX_S:g} s), "
                 f"not repeated for the re-measurement")
    return out
