"""What a search worker's exploration spends: the evaluator's phase times, and the
seconds of each evaluation charged to the ``gpu_seconds`` budget.

Not charged: waits for the device's slot (the judge reports them as the ``slot_wait``
phase) or for room in its memory (``memory_wait``): with several workers on one GPU, they
are the other workers' evaluations.
Not covered: device time proper (the seconds a GPU was busy); phases are wall time as the
caller saw them.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from solforge.records.evaluation import EvaluationRecord

CHARGED_PHASES = ("candidate", "policy", "timing", "host_clock")
# a compiled candidate's estimate, once one was measured: this times the longest seen
COMPILE_MARGIN = 1.5
# the gap to speed of light at which the budgets stay as set, and the scale's bounds
GAP_AT_SET_BUDGET = 0.5
GAP_SCALE_BOUNDS = (0.5, 2.0)
# a problem extracted from a model: the share of the model's time at which the budgets stay
# as set, and the bounds of that factor
SHARE_AT_SET_BUDGET = 0.1
SHARE_SCALE_BOUNDS = (0.5, 2.0)


def roofline_fraction(record: EvaluationRecord) -> float | None:
    """How near the speed of light ``record`` ran: the geometric mean over its timed
    workloads of ``T_SOL / T`` (``T_SOL`` at least the launch floor, the ratio at most 1);
    None when no workload has both a time and a bound."""
    ratios = []
    for w in record.workloads:
        if w.time_ms and w.time_ms > 0 and w.sol_ms is not None:
            bound = max(w.sol_ms, w.sol_floor_ms or 0.0)
            ratios.append(min(1.0, max(bound / w.time_ms, 1e-6)))
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def best_baseline_fraction(record: EvaluationRecord) -> float | None:
    """:func:`roofline_fraction` of the best the problem already has: per workload the
    fastest of the record's own time and its baselines' (eager; torch.compile unless its
    outputs failed the tolerance), so a reference torch.compile already brings near its
    bound shows little headroom (the planner's survey ranks problems by it). None as
    there."""
    ratios = []
    for w in record.workloads:
        times = [t for t in (w.time_ms, w.eager_ms,
                             w.compile_ms if w.compile_within_tolerance is not False else None)
                 if t is not None and t > 0]
        if times and w.sol_ms is not None:
            bound = max(w.sol_ms, w.sol_floor_ms or 0.0)
            ratios.append(min(1.0, max(bound / min(times), 1e-6)))
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def gap_scale(reference: EvaluationRecord, share: float | None = None) -> float:
    """How much of its budgets a problem's search gets by the reference's measured gap to
    speed of light (``SearchConfig.budget_by_gap``): ``(1 - f) / GAP_AT_SET_BUDGET`` within
    ``GAP_SCALE_BOUNDS``, ``f`` the reference's :func:`roofline_fraction` (its time against
    the bound, not its SOL score: a reference as fast as its baselines scores 0.5 however
    far it is from the bound; KernelBench's ResNet block ran at 6% of its bound and was
    searched as if half way there). Without per-workload bounds, ``f`` is the SOL score;
    1.0 when the reference failed or has neither.

    ``share``: the problem's share of its source model's time (``Problem.model_share``, a
    problem ``solforge extract`` wrote), times ``share / SHARE_AT_SET_BUDGET`` within
    ``SHARE_SCALE_BOUNDS``: a module with a fifth of the model's time gets twice the search
    of one with a tenth, one of a few percent half (the planner's headroom also weighs the
    share, to choose the next problem)."""
    factor = 1.0
    if share is not None:
        lo, hi = SHARE_SCALE_BOUNDS
        factor = min(hi, max(lo, share / SHARE_AT_SET_BUDGET))
    return factor * _gap_factor(reference)


def _gap_factor(reference: EvaluationRecord) -> float:
    if not reference.passed:
        return 1.0
    f = roofline_fraction(reference)
    if f is None:
        f = reference.sol_score
    if f is None:
        return 1.0
    lo, hi = GAP_SCALE_BOUNDS
    return min(hi, max(lo, (1.0 - min(f, 1.0)) / GAP_AT_SET_BUDGET))


def charged_seconds(record: EvaluationRecord, wall_s: float) -> float:
    """What one exploring evaluation costs the ``gpu_seconds`` budget: the seconds of its
    :data:`CHARGED_PHASES`, or ``wall_s`` for a record without phase times (an evaluator
    that reports none)."""
    if not record.phase_seconds:
        return wall_s
    return sum(record.phase_seconds.get(p, 0.0) for p in CHARGED_PHASES)


def estimated_seconds(c: Any, compile_seen: float | None) -> float:
    """What evaluating candidate ``c`` is expected to charge the ``gpu_seconds`` budget:
    its static ``cost``, with the compile part (``c.compile_s``) replaced by
    :data:`COMPILE_MARGIN` times ``compile_seen``, the longest charged seconds of an
    evaluation of this problem that compiled in a plain mode (None: none yet). The static
    figure (40 s on a GPU) was 4-7x what such evaluations charged on an H100's KernelBench
    problems (6-11 s; 24 s for Swin), so compiled candidates were skipped for budget they
    would not have spent (benchmarks/results/2026-12-07-h100-s30/call2).

    Max-autotune and Inductor-option candidates have a compile part too: their tuning on
    top stays static (``families/inductor.TUNING_S``, ``reference_facts.autotune_seconds``:
    per GEMM and convolution, from an H100's first calls), and their own charged seconds
    never count as a plain compile's (``SearchState.saw_compile``).

    Not covered: the non-compile part, kept as estimated; a tuning that takes longer than
    the H100 measured (another host, many more distinct shapes)."""
    if c.compile_s <= 0 or compile_seen is None:
        return c.cost
    return c.cost - c.compile_s + COMPILE_MARGIN * compile_seen


class PhaseClock:
    """Seconds per evaluator phase, from the phase messages the judge sends to the
    :class:`Evaluator`'s ``on_phase`` hook (found through wrappers' ``inner``, such as the
    planner's cache; an evaluator without the hook measures nothing), or from one message
    ``{"seconds": {phase: s}}`` per evaluation (a remote judge's, ``ray_backend.py``)."""

    def __init__(self, evaluator: Any) -> None:
        while not hasattr(evaluator, "on_phase") and hasattr(evaluator, "inner"):
            evaluator = evaluator.inner
        self.evaluator = evaluator if hasattr(evaluator, "on_phase") else None
        self.previous = getattr(self.evaluator, "on_phase", None)
        self.seconds: Counter[str] = Counter()
        self.phase: str | None = None
        self.since = 0.0

    def __call__(self, msg: dict[str, Any]) -> None:
        self.stop()
        if "seconds" in msg:  # a remote judge's phase times, sent with its record
            self.seconds.update({k: float(v) for k, v in msg["seconds"].items()})
            if self.previous is not None:
                self.previous(msg)
            return
        self.phase, self.since = msg.get("phase"), time.monotonic()
        if self.previous is not None:
            self.previous(msg)

    def stop(self) -> None:
        if self.phase is not None:
            self.seconds[self.phase] += time.monotonic() - self.since
            self.phase = None

    def __enter__(self) -> PhaseClock:
        if self.evaluator is not None:
            self.evaluator.on_phase = self
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        if self.evaluator is not None:
            self.evaluator.on_phase = self.previous

    @property
    def compile_s(self) -> float:
        return self.seconds["build"] + self.seconds["candidate"]
