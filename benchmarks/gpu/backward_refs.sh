#!/usr/bin/env bash
# One device call (or a few, with PART): every backward problem's reference
# (solforge/problems/corpus/backward/) judged as its own solution on the GPU at its real
# workloads: `solforge bench <names> --solution reference`, 2 correctness trials (two input
# distributions), eager baseline, a short timing budget.
# Usage (on the GPU machine, from the repository root; .whl/ carried as for session.sh):
#   bash benchmarks/gpu/backward_refs.sh              # all of them in one call
#   PART=1/2 bash benchmarks/gpu/backward_refs.sh     # the first half (then PART=2/2)
# Expected: every problem PASSED on every workload; a reference that runs out of memory or
# time on the H200 shows as its status and message in the table.
# Out: $OUT/backward_refs.md (one row per problem and workload: status, max abs error,
# kernel ms, achieved TFLOP/s and GB/s from the declared flops/bytes, SOL score),
# $OUT/records_<i>of<k>.json (the evaluation records), $OUT/bench_<i>of<k>.log, env.txt.
# DEADLINE (seconds, default 560) bounds the call; DEVICE=cpu dry-runs it on the CPU
# workloads; ONLY="name,name" picks problems.
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache} OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
export PYTHONPATH=$PWD:${PYTHONPATH:-}
DEVICE=${DEVICE:-cuda}
PART=${PART:-1/1}
TAG=_${PART/\//of}
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u; } > "$OUT/env.txt" 2>&1
NAMES=${ONLY:-$(python3 - "$PART" <<'EOF'
import sys
from solforge.problems import builtin_problems
i, k = (int(x) for x in sys.argv[1].split("/"))
names = sorted(p.name for p in builtin_problems() if p.direction == "backward")
print(",".join(names[i - 1::k]))
EOF
)}
echo "problems: $NAMES" | tee "$OUT/bench$TAG.log"
timeout -k 20 "${DEADLINE:-560}" python3 -m solforge.cli.main bench "$NAMES" \
  --solution reference --device "$DEVICE" --trials 2 --baselines eager --budget-ms 150 \
  --timeout 240 --json "$OUT/records$TAG.json" >> "$OUT/bench$TAG.log" 2>&1
echo "bench rc=$?" | tee -a "$OUT/bench$TAG.log"
python3 - "$OUT" <<'EOF'
import glob, json, sys
out = sys.argv[1]
rows = ["| problem | workload | status | max abs err | ms | TFLOP/s | GB/s | SOL |",
        "|---|---|---|---|---|---|---|---|"]
passed = total = 0
for f in sorted(glob.glob(f"{out}/records*.json")):
    if f.endswith(".summary.json"):
        continue
    for r in json.load(open(f)):
        ws = r.get("workloads") or []
        if not ws:
            rows.append(f"| {r['problem']} | - | {r['status']} | | | | | "
                        f"{r.get('message', '')[:80]} |")
        for w in ws:
            total += 1
            passed += bool(w.get("correct"))
            ms = w.get("time_ms")
            tf = (w["flops"] / ms / 1e9 if ms and w.get("flops") else None)
            gb = (w["bytes"] / ms / 1e6 if ms and w.get("bytes") else None)
            fmt = lambda v, spec: "" if v is None else format(v, spec)
            status = w.get("status") or ("PASSED" if w.get("correct") else r["status"])
            rows.append(f"| {r['problem']} | {w['name']} | {status} | "
                        f"{fmt(w.get('max_abs_error'), '.3g')} | {fmt(ms, '.3f')} | "
                        f"{fmt(tf, '.1f')} | {fmt(gb, '.0f')} | {fmt(w.get('sol_score'), '.2f')} |")
text = "\n".join(rows) + f"\n\n{passed} of {total} workloads correct\n"
open(f"{out}/backward_refs.md", "w").write(text)
print(text)
EOF
