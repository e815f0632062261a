#!/usr/bin/env bash
# Every built-in problem's reference on its real (non-CPU) workloads on the GPU, in one call:
# the model and inputs built on cuda from the workload's params (seed 0, the "normal"
# distribution), the forward run twice (it must give finite, identical outputs, not all
# constant), then timed eagerly with CUDA events (median of up to 20 calls within ~200 ms).
# One process runs the problems in order; each problem gets PER_PROBLEM seconds (SIGALRM
# between kernel launches), and the call stops starting problems when DEADLINE nears, so a
# second call with SKIP_DONE=1 and the same $OUT carries on where the first stopped.
# Usage (on the GPU machine, from the repository root):
#   OUT=/tmp/out bash benchmarks/gpu/corpus_refs.sh
# Knobs: PROBLEMS (comma-separated names; default all built-ins), SHARD=i/n (every n-th
# problem from i), PER_PROBLEM (s, default 90), DEADLINE (s, default 540), SKIP_DONE=1,
# DEVICE (default cuda; cpu only to smoke-test the script on small problems).
# Results under $OUT: corpus_refs.jsonl (one row per workload: problem, workload, status,
# eager_ms, peak_gib, error), corpus_refs.md (the table), corpus_refs.log.
# Status: PASSED (finite, deterministic, not constant), NONDET (two identical calls
# differ: max |diff| given), NONFINITE, CONSTANT, OOM, TIMEOUT, ERROR (message given).
# Not covered here: comparing the GPU result with the CPU one at real sizes (too large for
# CPU time); `solforge bench <names> --solution reference --device cuda` does the full
# evaluator run for chosen problems.
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
export PYTHONPATH=$PWD:${PYTHONPATH:-}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
python3 - <<'PY' 2>&1 | tee -a "$OUT/corpus_refs.log"
import json, os, signal, statistics, time, traceback
from pathlib import Path

import torch

from solforge.problems import builtin_problems, gen
from solforge.problems.loader import import_file
from solforge.problems.spec import call_with_params

out = Path(os.environ["OUT"])
rows_path = out / "corpus_refs.jsonl"
per_problem = float(os.environ.get("PER_PROBLEM", "90"))
deadline = time.time() + float(os.environ.get("DEADLINE", "540")) - 30
wanted = [s for s in os.environ.get("PROBLEMS", "").split(",") if s]
problems = [p for p in builtin_problems() if not wanted or p.name in wanted]
if "SHARD" in os.environ:
    i, n = (int(x) for x in os.environ["SHARD"].split("/"))
    problems = problems[i::n]
done = set()
if os.environ.get("SKIP_DONE") == "1" and rows_path.exists():
    done = {json.loads(line)["problem"] for line in rows_path.read_text().splitlines() if line}
dev = os.environ.get("DEVICE", "cuda")  # DEVICE=cpu: a smoke test of this script only
cuda = dev.startswith("cuda")
print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if cuda else dev}, "
      f"{len(problems)} problems")


def sync():
    if cuda:
        torch.cuda.synchronize()


def timed_call(model, inputs):
    """One call's time in ms: CUDA events on a GPU, the wall clock on a CPU."""
    if not cuda:
        t0 = time.perf_counter()
        model(*inputs)
        return (time.perf_counter() - t0) * 1e3
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    model(*inputs)
    e.record()
    e.synchronize()
    return s.elapsed_time(e)


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


signal.signal(signal.SIGALRM, _alarm)


def outputs(o):
    return list(o) if isinstance(o, (tuple, list)) else [o]


def run_workload(problem, mod, w):
    params = dict(w.params)
    torch.manual_seed(42)
    with torch.device(dev):
        model = mod.Model(*call_with_params(mod.get_init_inputs, params))
    model = model.to(dev)
    if not problem.train_mode:
        model.eval()
    torch.manual_seed(0)
    with gen.distribution("normal"), torch.device(dev):
        inputs = call_with_params(mod.get_inputs, params)
    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in inputs]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        a = outputs(model(*inputs))
        b = outputs(model(*inputs))
        sync()
        status, note = "PASSED", ""
        for x, y in zip(a, b):
            if not isinstance(x, torch.Tensor):
                continue
            xf, yf = x.float(), y.float()
            if not torch.isfinite(xf).all():
                status, note = "NONFINITE", f"{(~torch.isfinite(xf)).sum().item()} entries"
                break
            if not torch.equal(x, y):
                status, note = "NONDET", f"max |diff| {(xf - yf).abs().max().item():.3g}"
            if x.numel() > 1 and x.dtype != torch.bool and xf.std() == 0:
                status, note = "CONSTANT", "output is constant"
                break
        del a, b
        times = []
        for _ in range(2):
            model(*inputs)
        sync()
        t_end = time.perf_counter() + 0.2
        while len(times) < 20 and (len(times) < 3 or time.perf_counter() < t_end):
            times.append(timed_call(model, inputs))
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else 0.0
    return status, note, statistics.median(times), peak


with rows_path.open("a") as rows:
    for problem in problems:
        if problem.name in done:
            continue
        if time.time() > deadline:
            print(f"deadline: stopped before {problem.name}; rerun with SKIP_DONE=1")
            break
        mod = import_file(problem.path)
        signal.alarm(int(per_problem))
        t0 = time.time()
        try:
            for w in problem.workloads:
                if w.cpu:
                    continue
                row = {"problem": problem.name, "workload": w.name, "family": problem.family,
                       "category": problem.category, "direction": problem.direction}
                try:
                    status, note, ms, peak = run_workload(problem, mod, w)
                    row.update(status=status, eager_ms=round(ms, 4), peak_gib=round(peak, 2),
                               error=note)
                except Timeout:
                    row.update(status="TIMEOUT", error=f">{per_problem:.0f} s for the problem")
                    rows.write(json.dumps(row) + "\n")
                    raise
                except torch.cuda.OutOfMemoryError:
                    row.update(status="OOM", error="out of memory")
                except Exception as e:  # recorded, and the next workload goes on
                    row.update(status="ERROR", error=f"{type(e).__name__}: {str(e)[:300]}")
                    traceback.print_exc(limit=3)
                rows.write(json.dumps(row) + "\n")
                rows.flush()
                print(f"{problem.name:44s} {w.name:32s} {row['status']:9s} "
                      f"{row.get('eager_ms', '-')!s:>10} ms  {row.get('error', '')}")
                if cuda:
                    torch.cuda.empty_cache()
        except Timeout:
            print(f"{problem.name}: TIMEOUT after {time.time() - t0:.0f} s")
        finally:
            signal.alarm(0)

rows_all = [json.loads(line) for line in rows_path.read_text().splitlines() if line]
lines = ["| problem | workload | family | status | eager ms | peak GiB | note |",
         "|---|---|---|---|---|---|---|"]
for r in rows_all:
    lines.append(f"| {r['problem']} | {r['workload']} | {r['family']} | {r['status']} | "
                 f"{r.get('eager_ms', '-')} | {r.get('peak_gib', '-')} | {r.get('error', '')} |")
counts = {}
for r in rows_all:
    counts[r["status"]] = counts.get(r["status"], 0) + 1
lines += ["", f"{len({r['problem'] for r in rows_all})} problems, {len(rows_all)} workloads: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))]
(out / "corpus_refs.md").write_text("\n".join(lines) + "\n")
print(lines[-1])
PY
