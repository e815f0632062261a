"""Figures derived from measurements: the one median, geomean and best baseline every
layer uses (a record's speedup against the best baseline is ``evaluation.speedup_vs_best``).

Not covered: spreads and quantiles of a timing (``bench/measure/timing.py`` keeps those
with the samples they come from).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def median(xs: Iterable[float]) -> float | None:
    """The median (the mean of the two middle values for an even count); None when empty."""
    ys = sorted(xs)
    if not ys:
        return None
    m = len(ys) // 2
    return ys[m] if len(ys) % 2 else 0.5 * (ys[m - 1] + ys[m])


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the known values (0 if any is 0); None when none is known."""
    xs = [v for v in values if v is not None and v >= 0 and math.isfinite(v)]
    if not xs:
        return None
    if min(xs) == 0:
        return 0.0
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def best_baseline_ms(eager_ms: float | None, compile_ms: float | None,
                     compile_counts: bool = True) -> float | None:
    """The faster of the measured baselines (a missing or zero figure is not measured;
    ``compile_counts`` False: a compile baseline outside the problem's tolerance, eager
    alone)."""
    known = [t for t in (eager_ms, compile_ms if compile_counts else None) if t]
    return min(known) if known else None
