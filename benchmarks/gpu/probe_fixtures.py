"""Evaluate a few anti-cheat fixtures one at a time, alone, and keep every figure.

For a test of `tests/anticheat` that fails on a GPU: the test's assertion shows the status
and message only; this writes each whole evaluation record (per workload: kernel, latency
and host times, the baselines, the idle-window CPU of the background check, flags) to a
JSON file and prints the figures the clock and idle checks use.

Usage (repository root): python benchmarks/gpu/probe_fixtures.py --device cuda \
    --json OUT.json hacks/background_spinner.py:small,held,gpu_mid \
    honest/triton_autotune.py:small,held,gpu_big

Each argument is a path under tests/fixtures, a colon, and the workloads of
tests/fixtures/problems/tiny_linear.py to run. It runs them in order with one evaluator
(the tests run four at once under xdist): a failure here is the evaluator's alone, not
contention's. Not covered: repeating a case (run it twice to see the spread).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solforge.bench.evaluator import Evaluator  # noqa: E402
from solforge.records.options import EvalOptions  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
FIELDS = ("name", "time_ms", "latency_ms", "host_ms", "eager_ms", "compile_ms",
          "timed_calls", "idle_cpu_s", "idle_wall_s", "flags")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", help="FIXTURE:WORKLOAD,WORKLOAD")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--problem", default=str(FIXTURES / "problems" / "tiny_linear.py"))
    ap.add_argument("--json", type=Path, required=True)
    args = ap.parse_args()
    out = []
    with Evaluator(EvalOptions(device=args.device)) as ev:
        for case in args.cases:
            name, _, wl = case.partition(":")
            start = time.monotonic()
            r = ev.evaluate(args.problem, FIXTURES / name,
                            workloads=wl.split(",") if wl else "all")
            d = r.to_json()
            d["probe_seconds"] = round(time.monotonic() - start, 2)
            out.append(d)
            print(f"{name}: {d['status']} {d['flags']} {d['message'][:400]}", flush=True)
            for w in d["workloads"]:
                print("   ", {k: w.get(k) for k in FIELDS}, flush=True)
            args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
