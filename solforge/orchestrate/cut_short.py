"""Which finished units of a run the run's own stop cut short.

A unit cut short (the run's budget ran out while its worker explored) does not count
against a problem's ``max_units``: a resumed run gives the problem another unit, which
reuses what was judged. The search worker marks such a unit (``WorkerResult.cut_short``);
ledgers written before that mark are read from the worker's skip events instead.

Not covered: an LLM worker's unit (stopped, it saves its exit and would only report it
again when resumed, so its unit counts as done).
"""

from __future__ import annotations

from typing import Any

# how a worker's skip reason starts when the run is stopping (``cut_short_units`` reads
# it in ledgers that predate ``WorkerResult.cut_short``)
STOPPING = "the run is stopping"


def cut_short_units(led: Any) -> set[int]:
    """Ids of the finished units that the run's stop cut short: marked so
    (``cut_short``), or, in a ledger older than that mark, a unit during which its worker
    skipped a candidate because the run was stopping (the search worker's event)."""
    stops = [e for e in led.events("skipped")
             if str(e["data"].get("reason", "")).startswith(STOPPING)]
    out = set()
    for w in led.work("done"):
        if "cut_short" in w["data"]:
            if w["data"]["cut_short"]:
                out.add(w["id"])
        elif any(e["problem"] == w["problem"] and e["worker"] == w["worker"]
                 and (w["started"] or 0) <= e["ts"] <= (w["finished"] or float("inf"))
                 for e in stops):
            out.add(w["id"])
    return out
