#!/usr/bin/env bash
# One device call: builds, checks and times what the named steps ask, results under $OUT.
# Usage (on the GPU machine, from the repository root):
#   bash benchmarks/gpu/session.sh STEP [STEP ...]
# Steps: env calibrate tests reference examples cute hacks optimize throughput
# DEADLINE (seconds after start, default 570) bounds the open-ended steps; DEVICE=cpu
# (with REF_TARGET/OPT_TARGET set to a small target) dry-runs the steps on a CPU.
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
      timeout $(left) python3 -m pytest -q -rP -p no:cacheprovider --timeout 150 tests/bench/test_gpu_evaluator.py tests/sol/test_gpu.py \
        2>&1 | tee "$OUT/gpu_tests.log" | tail -40 ;;
    calibrate)
      step calibrate
      timeout 120 $SF calibrate --device ${DEVICE:-cuda} --json "$OUT/calibration.json" 2>&1 | tail -15 ;;
    reference)
      step reference
      timeout $(left) $SF bench ${REF_TARGET:-all} --solution reference --device ${DEVICE:-cuda} --budget-ms 150 \
        --timeout 120 --json "$OUT/reference.json" 2>&1 | tail -70 ;;
    examples)
      step examples
      timeout 300 $SF bench ${EX_TARGET:-all} --solution examples/solutions --device ${DEVICE:-cuda} --budget-ms 300 \
        --json "$OUT/examples.json" 2>&1 | tail -30
      for lang in cuda_cpp; do
        timeout 200 $SF bench ${EX_TARGET:-all} --solution examples/solutions/$lang --device ${DEVICE:-cuda} \
          --budget-ms 300 --json "$OUT/examples_$lang.json" 2>&1 | tail -12
      done ;;
    cute)
      # CuTe DSL: the cu12 libs wheel (92 MB) comes in two parts over two warm calls:
      # call 1 copies .cute1/ to /tmp/cute, call 2 carries .cute2/ (part 2 + the small wheels)
      step cute
      if [ -d .cute1 ]; then mkdir -p /tmp/cute && cp .cute1/* /tmp/cute/; fi
      if [ -d .cute2 ] && [ -f /tmp/cute/cu12part.aa ]; then
        cat /tmp/cute/cu12part.aa .cute2/cu12part.ab > /tmp/cute/nvidia_cutlass_dsl_libs_cu12-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/cutepkg \
          /tmp/cute/nvidia_cutlass_dsl_libs_cu12-*.whl .cute2/nvidia_cutlass_dsl-*.whl \
          .cute2/nvidia_cutlass_dsl_libs_base-*.whl
        export PYTHONPATH=/tmp/cutepkg:/tmp/cutepkg/nvidia_cutlass_dsl/python_packages:/tmp/cutepkg/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
        python3 -c "import cutlass.cute" && timeout $(left) $SF bench residual_gate_flux \
          --solution examples/solutions/cute_dsl/residual_gate_flux.py --device ${DEVICE:-cuda} \
          --json "$OUT/cute.json" 2>&1 | tail -20
      fi ;;
    hacks)
      step hacks
      timeout $(left) python3 -m pytest -q -p no:cacheprovider --timeout 200 -m gpu \
        tests/anticheat 2>&1 | tail -30 | tee "$OUT/anticheat_gpu.log" ;;
    optimize)
      step optimize
      rm -rf /tmp/optrun /tmp/optexport
      timeout $(left) $SF optimize ${OPT_TARGET:-all} --device ${DEVICE:-cuda} --workers ${OPT_WORKERS:-3} \
        --run-dir /tmp/optrun --max-units 1 2>&1 | tail -40
      $SF export /tmp/optrun --out /tmp/optexport && cp /tmp/optexport/summary.json "$OUT/optimize_summary.json"
      $SF runs show /tmp/optrun --json > "$OUT/optimize_run.json" ;;
    throughput)
      step throughput
      timeout $(left) python3 benchmarks/throughput.py --device ${DEVICE:-cuda} --workers 3 \
        --json "$OUT/throughput.json" 2>&1 | tail -20 ;;
    *) echo "unknown step $s" ;;
  esac
done
step done
