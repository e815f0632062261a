"""Which finished units of a run the run's own stop cut short.

A unit cut short (the run's budget ran out while its worker explored) does not count
against a problem's ``max_units``: a resumed run gives the problem another unit, which
reuses what was judged. The search worker marks such a unit (``WorkerResult.cut_short``,
starting with :data:`STOPPING`) and the planner keeps the mark in the unit's row.

Not covered: an LLM worker's unit (stopped, it saves its exit and would only report it
again when resumed, so its unit counts as done).
"""

from __future__ import annotations

from typing import Any

# how a worker's skip reason, and so its unit's cut_short mark, starts when the run is
# stopping
STOPPING = "the run is stopping"


def cut_short_units(led: Any) -> set[int]:
    """Ids of the finished units that the run's stop cut short (marked ``cut_short``)."""
    return {w["id"] for w in led.work("done") if w["data"].get("cut_short")}
