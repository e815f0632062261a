#!/usr/bin/env bash
# `solforge synth` on the H200, in one call: the CUDA filters (GPU-sized workloads run
# eagerly, eager time inside the CUDA window on gpu_medium), reproducibility there, and the
# synthesized references judged at real sizes.
#   1. synth --n 200 --seed 0 --device cuda --no-compile-check, twice; diff -r of the two
#      (the eager-time window is the one filter a GPU's timing could flip);
#   2. synth --n 12 --seed 0 --device cuda with the torch.compile check (Inductor + Triton);
#   3. solforge bench of that batch against its own reference on every workload.
# Usage (on the GPU machine, from the repository root):
#   OUT=/tmp/out bash benchmarks/gpu/synth.sh
# N (default 200), N_COMPILE (default 12) and DEADLINE (s, default 560) bound the call.
# Results under $OUT: a.log, b.log, diff.txt, c.log, bench.json, bench.log, times.txt,
# the three batches' synth.report.json (report-{a,b,c}.json), rc.txt.
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
export PYTHONPATH=$PWD:${PYTHONPATH:-}
SF="python3 -m solforge.cli.main"
T0=$(date +%s)
left() { local l=$(( ${DEADLINE:-560} - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
N=${N:-200}
NC=${N_COMPILE:-12}
W=$(mktemp -d)
rc=0
stamp() { echo "$1 $(( $(date +%s) - T0 )) s" >> "$OUT/times.txt"; }
stamp start
timeout $(( $(left) / 4 )) $SF synth --n "$N" --seed 0 --device cuda --no-compile-check \
  --out "$W/a" > "$OUT/a.log" 2>&1 || rc=$?
stamp a
timeout $(( $(left) / 3 )) $SF synth --n "$N" --seed 0 --device cuda --no-compile-check \
  --out "$W/b" > "$OUT/b.log" 2>&1 || rc=$?
stamp b
diff -r "$W/a" "$W/b" > "$OUT/diff.txt" 2>&1; echo "diff rc $?" >> "$OUT/times.txt"
timeout $(( $(left) / 2 )) $SF synth --n "$NC" --seed 0 --device cuda --out "$W/c" \
  > "$OUT/c.log" 2>&1 || rc=$?
stamp c
for x in a b c; do cp "$W/$x/synth.report.json" "$OUT/report-$x.json" 2>/dev/null; done
timeout $(( $(left) - 5 )) $SF bench "$W/c" --solution reference --device cuda \
  --baselines eager --trials 2 --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1 || rc=$?
stamp bench
echo "$rc" > "$OUT/rc.txt"
