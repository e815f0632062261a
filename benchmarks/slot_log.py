"""How busy a device's slot was, from its log (``bench/measure/slots.py``): over a
window, the seconds it was held exclusively (timings; in logs before session 24 also the
baselines' preparation, the work counts and runner start-ups), held shared (correctness
trials, policy probes, and now those three, several at once), held at all, the seconds
runner start-ups held it (either way), and the seconds shared holds overlapped each
other (the work sharing let run side by side). With ``--json`` the same as one JSON
object.

    python benchmarks/slot_log.py /tmp/solforge-slots/cuda_0.log --since 1765030000

Not covered: holds still open when the log was read (a hold is written when it ends);
GPU work outside any slot.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solforge.bench.measure.slots import RUNNER_START, covered_seconds, read_log  # noqa: E402


def busy(log: str | Path, since: float = 0.0, until: float | None = None) -> dict:
    """The slot's use over [since, until] (until: the last hold's end)."""
    holds = [h for h in read_log(log) if h[1] >= since and (until is None or h[0] <= until)]
    if not holds:
        return {"holds": 0}
    lo = max(since, min(h[0] for h in holds))
    hi = until if until is not None else max(h[1] for h in holds)
    excl = [(a, b) for a, b, _p, purpose, shared in holds if not shared]
    shared = [(a, b) for a, b, _p, _purpose, s in holds if s]
    start = [(a, b) for a, b, _p, purpose, _s in holds if purpose == RUNNER_START]
    shared_sum = sum(min(b, hi) - max(a, lo) for a, b in shared if min(b, hi) > max(a, lo))
    shared_union = covered_seconds(shared, lo, hi)
    held = covered_seconds(excl + shared, lo, hi)
    wall = hi - lo
    return {"holds": len(holds), "window_s": round(wall, 3),
            "exclusive_s": round(covered_seconds(excl, lo, hi), 3),
            "runner_start_s": round(covered_seconds(start, lo, hi), 3),
            "shared_s": round(shared_union, 3),
            "shared_overlap_s": round(shared_sum - shared_union, 3),
            "held_s": round(held, 3), "busy_fraction": round(held / wall, 4) if wall else None,
            "exclusive_fraction": round(covered_seconds(excl, lo, hi) / wall, 4) if wall else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="a slot log (<slots dir>/<device>.log)")
    ap.add_argument("--since", type=float, default=0.0, help="wall-clock seconds (epoch)")
    ap.add_argument("--until", type=float, default=None, help="wall-clock seconds (epoch)")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args(argv)
    out = busy(a.log, a.since, a.until)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
