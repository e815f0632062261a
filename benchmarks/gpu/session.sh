#!/usr/bin/env bash
# One device call: builds, checks and times what the named steps ask, results under $OUT.
# Usage (on the GPU machine, from the repository root):
#   bash benchmarks/gpu/session.sh STEP [STEP ...]
# Steps: env tests calibrate reference examples hacks optimize throughput cute
# Needs the pydantic wheels carried in .whl/ (the H200 image lacks pydantic).
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
if ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .whl/pydantic-2*.whl .whl/pydantic_core-*.whl .whl/annotated_types-0.7.0*.whl \
    .whl/typing_inspection-0.4.2*.whl || exit 3
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
SF="python3 -m solforge.cli.main"
T0=$(date +%s)
step() { echo "=== $1 ($(( $(date +%s) - T0 ))s)"; }
# seconds left before DEADLINE (seconds after start; default 570), at least 30
left() { local l=$(( ${DEADLINE:-570} - ($(date +%s) - T0) )); echo $(( l > 30 ? l : 30 )); }
for s in "$@"; do
  case "$s" in
    env)
      step env
      { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
        python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
        date -u; } 2>&1 ;;
    tests)
      step tests
      timeout 240 python3 -m pytest -q -p no:cacheprovider --timeout 150 tests/bench/test_gpu_evaluator.py tests/sol/test_gpu.py \
        2>&1 | tail -40 | tee "$OUT/gpu_tests.log" ;;
    calibrate)
      step calibrate
      timeout 120 $SF calibrate --device cuda --json "$OUT/calibration.json" 2>&1 | tail -15 ;;
    reference)
      step reference
      timeout $(left) $SF bench ${REF_TARGET:-all} --solution reference --device cuda --budget-ms 150 \
        --timeout 120 --json "$OUT/reference.json" 2>&1 | tail -70 ;;
    examples)
      step examples
      timeout 300 $SF bench all --solution examples/solutions --device cuda --budget-ms 300 \
        --json "$OUT/examples.json" 2>&1 | tail -30
      for lang in cuda_cpp; do
        timeout 200 $SF bench all --solution examples/solutions/$lang --device cuda \
          --budget-ms 300 --json "$OUT/examples_$lang.json" 2>&1 | tail -12
      done ;;
    *) echo "unknown step $s" ;;
  esac
done
step done
