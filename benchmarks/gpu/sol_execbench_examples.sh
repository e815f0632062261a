#!/usr/bin/env bash
# One device call: SOL-ExecBench's shipped examples (tests/fixtures/sol_execbench, copied
# unchanged) through `solforge bench` on the GPU, their solution.json files as they are.
# Usage (on the GPU machine, from the repository root; .whl/ carried as for session.sh):
#   bash benchmarks/gpu/sol_execbench_examples.sh
# Expected: the triton, cuda_cpp and pytorch solutions PASS; cute_dsl PASSes where its
# kernel runs on the GPU at hand (it may target Blackwell); cutile, cutlass and cudnn are
# COMPILE_ERROR naming their language (solforge does not run them); the four reward-hack
# samples are REWARD_HACK. Per example: $OUT/<lang>_<name>.json (records),
# .traces.jsonl (FlashInfer-Trace records), .log; $OUT/summary.txt has one line each.
# DEADLINE (seconds, default 540) bounds the whole call; DEVICE=cpu dry-runs it on a CPU;
# ONLY="triton/rmsnorm hack:thread_injection ..." runs those items only.
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache} OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
export PYTHONPATH=$PWD:${PYTHONPATH:-}
DEVICE=${DEVICE:-cuda}
EX=tests/fixtures/sol_execbench/examples
HACKS=tests/fixtures/sol_execbench/reward_hacks
T0=$(date +%s)
left() { local l=$(( ${DEADLINE:-540} - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
{ nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u; } > "$OUT/env.txt" 2>&1
: > "$OUT/summary.txt"
# bench LABEL FOLDER SOLUTION_JSON [extra options]
bench() {
  local label=$1 folder=$2 sol=$3; shift 3
  if [ "$(left)" -lt 30 ]; then echo "$label SKIPPED (deadline)" >> "$OUT/summary.txt"; return; fi
  echo "=== $label ($(( $(date +%s) - T0 ))s)"
  timeout -k 10 $(( $(left) < 240 ? $(left) : 240 )) python3 -m solforge.cli.main bench \
    "$folder" --solution "$sol" --device "$DEVICE" --trials 3 --baselines eager \
    --json "$OUT/$label.json" --trace-out "$OUT/$label.traces.jsonl" "$@" \
    > "$OUT/$label.log" 2>&1
  local rc=$?
  local st
  st=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(' '.join(x['status']+(' ['+','.join(x['flags'])+']' if x['flags'] else '')+': '+x['message'][:160].replace(chr(10),' ') for x in r))" "$OUT/$label.json" 2>/dev/null || echo "no record (rc=$rc)")
  echo "$label rc=$rc $st" | tee -a "$OUT/summary.txt"
}
# in priority order (a call that runs out of DEADLINE skips the rest); ONLY="..." picks some
ITEMS=${ONLY:-"triton/rmsnorm hack:lazy_output hack:monkey_patch hack:stream_injection
  hack:thread_injection cuda_cpp/rmsnorm cuda_cpp/flux_rope pytorch/linear_backward
  triton/nemotron_rms_norm triton/olmo3_post_norm pytorch/gemma3_swiglu cutile/jamba_attn_proj
  cutlass/gemm cudnn/softmax cute_dsl/jamba_attn_proj"}
for d in $ITEMS; do
  case "$d" in
    hack:*) h=${d#hack:}
      bench "hack_$h" "$EX/triton/rmsnorm" "$HACKS/solution_hack_$h.json" --no-timing ;;
    *) sol=$(ls $EX/$d/solution_*.json | head -1)
      bench "$(echo $d | tr / _)" "$EX/$d" "$sol" ;;
  esac
done
echo "=== done ($(( $(date +%s) - T0 ))s)"; cat "$OUT/summary.txt"
