"""The baselines of one workload, as the judge asks for them: one object per workload
over the cache (``cache.py``), the measurement (``measurement.py``), the memory of slow
compile warm-ups (``slow.py``) and the reference's counted work (``work_counts.py``).

Not covered: when the candidate is frozen, which files are checked first, and which
device slot is held while a baseline runs: the judge's timing phase decides those
(``judge/performance.py``); this object only measures and remembers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from solforge.bench.baselines import measurement, slow, work_counts
from solforge.bench.baselines.cache import known_unavailable, note_unavailable
from solforge.bench.baselines.measurement import Interleaved, Phase
from solforge.records import EvalOptions, WorkloadResult

if TYPE_CHECKING:
    from solforge.bench.measure.timing import TimingConfig
    from solforge.problems.spec import Problem, Workload


class WorkloadBaselines:
    """Eager and ``torch.compile`` figures of one workload's reference under ``opts``;
    ``phase`` reports what the judge is doing (a compile can take minutes)."""

    def __init__(self, problem: Problem, workload: Workload, opts: EvalOptions,
                 phase: Phase) -> None:
        self.problem, self.workload, self.opts, self.phase = problem, workload, opts, phase

    def missing(self, cfg: TimingConfig, fresh: bool = False) -> list[str]:
        """Kinds with no cached figure (``fresh``: every kind a re-measurement compiles),
        less those known to be unavailable."""
        return measurement.missing_baselines(self.problem, self.workload, cfg, self.opts,
                                             fresh=fresh)

    def prepare(self, ref: Any, pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
                res: WorkloadResult, kinds: list[str],
                agree: Callable[[Any], dict[str, Any] | None]) -> dict[str, Any]:
        """``kinds`` compiled and warmed up (the caller holds the device's slot);
        ``agree(fn)`` judges a compiled baseline's outputs as a candidate's are judged
        (``measurement.prepare_baselines``)."""
        return measurement.prepare_baselines(self.phase, self.problem, ref, self.workload,
                                             pool, seeds, cfg, self.opts, res, kinds,
                                             agree=agree)

    def time(self, ref: Any, pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
             res: WorkloadResult, prepared: dict[str, Any],
             skip: tuple[str, ...] = ()) -> dict[str, dict]:
        """Cached or freshly timed figures of every kind but ``skip``; fills the result's
        eager and compile times."""
        opts = self.opts if not skip else self.opts.model_copy(
            update={"baselines": [k for k in self.opts.baselines if k not in skip]})
        return measurement.time_baselines(self.phase, self.problem, ref, self.workload, pool,
                                          seeds, cfg, opts, res, prepared)

    def note_unavailable(self, res: WorkloadResult) -> None:
        """Say in the result which kinds were found unavailable before (not measured)."""
        note_unavailable(res, self.opts, known_unavailable(self.problem, self.workload,
                                                           self.opts))

    def note_tolerance(self, res: WorkloadResult) -> None:
        """Whether the compile baseline agreed with the reference at the problem's
        tolerance (checked when it was compiled), into the result."""
        measurement.note_tolerance(self.problem, self.workload, self.opts, res)

    def interleaved(self, prepared: dict[str, Any], pool: list[list[Any]], cfg: TimingConfig,
                    device: torch.device) -> Interleaved:
        """Fresh figures measured round by round beside the candidate (never cached)."""
        return Interleaved(prepared, pool, cfg, device)

    def with_slow_reused(self, res: WorkloadResult, base: dict[str, dict]) -> dict[str, dict]:
        """``base`` plus the earlier figures of compile kinds too slow to warm up again."""
        return slow.reuse(res, self.opts, slow.too_slow(self.problem, self.workload, self.opts),
                          base)

    def now(self, fn: Any, pool: list[list[Any]], seeds: list[int], cfg: TimingConfig,
            device: torch.device) -> dict:
        """``fn`` timed now, uncached (the reference's overhead beside the candidate)."""
        return measurement.time_fn(fn, pool, seeds, cfg, device)

    def counted_work(self, device: str, inputs: list[Any], count: Callable[[], Any]) -> Any:
        """The reference's counted work for these inputs, counted once per workload."""
        return work_counts.counted_once(self.problem, self.workload, device, inputs, count)
