#!/usr/bin/env bash
# One device call: builds, checks and times what the named steps ask, results under $OUT.
# Usage (on the GPU machine, from the repository root):
#   bash benchmarks/gpu/session.sh STEP [STEP ...]
# Steps: env calibrate waitprofile tests reference examples cute hacks probe optimize throughput
#        pack (last: more than 8 files of $OUT packed into $OUT/all.tgz, a call's limit)
#        solunits (benchmarks/gpu/check_sol_units.py: SOL units per op family)
#        winners (WINNERS="PROBLEM=SOLUTION ...": kept solutions on WINNER_TRIALS fresh seeds)
#        tpprofile (the warm Triton evaluations under py-spy, from the py-spy wheel in .whl/)
# DEADLINE (seconds after start, default 570) bounds the open-ended steps; DEVICE=cpu
# (with REF_TARGET/OPT_TARGET set to a small target) dry-runs the steps on a CPU.
# A step that ran to its end leaves $SOLFORGE_CACHE/done/<step> and is skipped next time on
# the same (warm) machine, so a later call can list the same steps and do what is left.
# REF_TARGET may name several targets (categories, problems), one record file each.
# TESTS_K selects GPU evaluator tests by pytest -k; GPUS spreads `optimize` over GPUs;
# OPT_ARGS adds options to `solforge optimize`. `after:STEP` waits for STEP to be done.
# Needs the pydantic wheels carried in .whl/ (the H200 image lacks pydantic). CuTe DSL needs
# four wheels (dsl, libs-base, libs-core, libs-cu12; protobuf and cuda-bindings are in the
# image): .cute1/ holds the first 47 MB of libs-cu12, .cute2/ the rest and the other three.
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
export PYTHONPATH=$PWD:${PYTHONPATH:-}
SF="python3 -m solforge.cli.main"
T0=$(date +%s)
step() { echo "=== $1 ($(( $(date +%s) - T0 ))s)"; }
DONE=$SOLFORGE_CACHE/done; mkdir -p "$DONE"
# done STEP: true when STEP already ran to its end on this machine; finished STEP RC marks it
done_() { if [ -e "$DONE/$1" ]; then echo "=== $1 already done on this machine"; return 0; fi; return 1; }
finished() { if [ "$2" = 0 ]; then touch "$DONE/$1"; fi; echo "=== $1 rc=$2 ($(( $(date +%s) - T0 ))s)"; }
# seconds left before DEADLINE (seconds after start; default 570), at least 1; a step
# that starts with less than 30 s left is skipped (`late`): on 2026-12-01 two steps given a
# 30 s floor each ran the call past its 600 s limit and every result of it was lost
left() { local l=$(( ${DEADLINE:-570} - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
late() { if [ "$(left)" -lt 30 ]; then echo "=== $1 skipped: $(left) s left before DEADLINE"; return 0; fi; return 1; }
for s in "$@"; do
  case "$s" in
    env)
      step env
      { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
        python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
        date -u; } 2>&1 ;;
    tests)
      done_ tests && continue; late tests && continue
      step tests
      set -o pipefail
      SOLFORGE_TEST_FAILURES="$OUT/gpu_test_failures.log" \
      timeout -k 10 $(left) python3 -m pytest -q -rP -p no:cacheprovider --timeout 150 ${TESTS_K:+-k "$TESTS_K"} \
        tests/bench/test_gpu_evaluator.py tests/sol/test_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
      finished tests $?; set +o pipefail ;;
    waitprofile)
      # another stream calibrates this machine; wait for its profile (at most 180 s)
      step waitprofile
      for _ in $(seq 90); do ls "$SOLFORGE_CACHE"/devices/*.json >/dev/null 2>&1 && break; sleep 2; done
      ls "$SOLFORGE_CACHE"/devices/ 2>&1 ;;
    calibrate)
      step calibrate
      timeout 120 $SF calibrate --device ${DEVICE:-cuda} --json "$OUT/calibration.json" 2>&1 | tail -15 ;;
    reference)
      for t in ${REF_TARGET:-all}; do
        done_ "reference_$t" && continue
        late "reference $t" && continue
        step "reference $t"
        # a comma in a file name keeps it from coming back from the device
        n=${t//,/_}
        timeout -k 10 $(left) $SF bench "$t" --solution reference --device ${DEVICE:-cuda} --budget-ms 150 \
          --timeout 120 --json "$OUT/reference_$n.json" > "$OUT/reference_$n.log" 2>&1
        rc=$?; tail -70 "$OUT/reference_$n.log"
        # exit 1 means some record did not pass: the bench still ran to its end
        [ $rc -le 1 ] && rc=0; finished "reference_$t" $rc
      done ;;
    examples)
      for d in examples/solutions examples/solutions/cuda_cpp; do
        n=$(basename $d); done_ "examples_$n" && continue
        late "examples $d" && continue
        step "examples $d"
        # EX_TARGET narrows the Triton examples; the language folders run whole
        tgt=${EX_TARGET:-all}; [ "$d" != examples/solutions ] && tgt=all
        timeout -k 10 $(left) $SF bench $tgt --solution $d --device ${DEVICE:-cuda} --budget-ms 150 \
          --json "$OUT/examples_$n.json" > "$OUT/examples_$n.log" 2>&1
        rc=$?; tail -40 "$OUT/examples_$n.log"; [ $rc -le 1 ] && rc=0; finished "examples_$n" $rc
      done ;;
    cute)
      # CuTe DSL: the cu12 libs wheel (92 MB) comes in two parts over two warm calls:
      # call 1 copies .cute1/ to /tmp/cute, call 2 carries .cute2/ (part 2 + the small wheels)
      done_ cute && continue
      step cute
      if [ -d .cute1 ]; then mkdir -p /tmp/cute && cp .cute1/* /tmp/cute/; fi
      if [ -d .cute2 ] && [ -f /tmp/cute/cu12part.aa ]; then
        cat /tmp/cute/cu12part.aa .cute2/cu12part.ab > /tmp/cute/nvidia_cutlass_dsl_libs_cu12-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/cutepkg \
          /tmp/cute/nvidia_cutlass_dsl_libs_cu12-*.whl .cute2/nvidia_cutlass_dsl-*.whl \
          .cute2/nvidia_cutlass_dsl_libs_base-*.whl .cute2/nvidia_cutlass_dsl_libs_core-*.whl
        export PYTHONPATH=/tmp/cutepkg:/tmp/cutepkg/nvidia_cutlass_dsl/python_packages:/tmp/cutepkg/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
        python3 -c "import cutlass.cute" && timeout -k 10 $(left) $SF bench residual_gate_flux \
          --solution examples/solutions/cute_dsl/residual_gate_flux.py --device ${DEVICE:-cuda} \
          --json "$OUT/cute.json" > "$OUT/cute.log" 2>&1
        rc=$?; tail -20 "$OUT/cute.log"; [ $rc -le 1 ] && rc=0; finished cute $rc
      fi ;;
    hacks)
      done_ hacks && continue; late hacks && continue
      step hacks
      set -o pipefail
      # pytest-xdist (in the H200 image): evaluations overlap, timings still queue for the
      # device slot; SOLFORGE_TEST_FAILURES gets each failure as it happens
      xd=""; python3 -c "import xdist" 2>/dev/null && xd="-n ${HACK_JOBS:-4}"
      SOLFORGE_TEST_FAILURES="$OUT/anticheat_failures.log" timeout -k 10 $(left) python3 -m pytest -q -rf \
        -p no:cacheprovider --timeout 200 $xd -m gpu tests/anticheat 2>&1 | tee "$OUT/anticheat_gpu.log" | tail -30
      finished hacks $?; set +o pipefail ;;
    probe)
      # PROBE_CASES (FIXTURE:WORKLOADS ...): anti-cheat fixtures alone, whole records kept
      done_ probe && continue; late probe && continue
      step probe
      timeout -k 10 $(left) python3 benchmarks/gpu/probe_fixtures.py --device ${DEVICE:-cuda} \
        --json "$OUT/probe.json" ${PROBE_CASES:-hacks/background_spinner.py:small,held,gpu_mid} \
        > "$OUT/probe.log" 2>&1
      rc=$?; tail -30 "$OUT/probe.log"; finished probe $rc ;;
    optimize)
      late optimize && continue
      step optimize
      # SOL scores need this machine's measured ceilings; without a stored calibration the
      # datasheet's stand in (session 8's call 3 ran so): calibrate first on a fresh machine
      if [ "${DEVICE:-cuda}" != cpu ] && ! ls "$SOLFORGE_CACHE"/devices/*.json >/dev/null 2>&1; then
        timeout 120 $SF calibrate --device cuda --json "$OUT/calibration.json" 2>&1 | tail -3
      fi
      # OPT_RESUME=1 goes on with the run directory a previous call left on this machine
      # (or one unpacked from OPT_FROM, an optimize_run.tgz of an earlier session)
      if [ -n "${OPT_FROM:-}" ] && [ ! -d /tmp/optrun ]; then tar xzf "$OPT_FROM" -C /tmp optrun; fi
      OPT_T0=$(date +%s)
      # floor units (a unit for each surveyed problem, after the budget's stop) start only
      # within OPT_MARGIN - 90 s of the stop, so they end before DEADLINE: with the
      # planner's default window (half the budget) session 24's corpus call was killed by
      # its DEADLINE in its floor units
      case " ${OPT_ARGS:-} " in *" --floor-s "*) ;; *)
        OPT_ARGS="${OPT_ARGS:-} --floor-s $(( ${OPT_MARGIN:-180} > 90 ? ${OPT_MARGIN:-180} - 90 : 0 ))" ;; esac
      if [ -n "${OPT_RESUME:-}${OPT_FROM:-}" ] && [ -d /tmp/optrun ]; then
        rm -rf /tmp/optexport
        timeout -k 10 $(left) $SF optimize --resume /tmp/optrun --workers ${OPT_WORKERS:-3} \
          ${GPUS:+--gpus $GPUS} --budget-wall-s $(( $(left) > ${OPT_MARGIN:-180} + 60 ? $(left) - ${OPT_MARGIN:-180} : 60 )) --max-units 1 \
          ${OPT_ARGS:-} > "$OUT/optimize.log" 2>&1; echo "optimize rc=$?"; tail -40 "$OUT/optimize.log"
      else
      rm -rf /tmp/optrun /tmp/optexport
      # the planner's own wall budget ends it OPT_MARGIN s (default 180) before the
      # deadline: problems in flight still run their verdict and re-measurement past it
      timeout -k 10 $(left) $SF optimize ${OPT_TARGET:-all} --device ${DEVICE:-cuda} --workers ${OPT_WORKERS:-3} \
        ${GPUS:+--gpus $GPUS} --budget-wall-s $(( $(left) > ${OPT_MARGIN:-180} + 60 ? $(left) - ${OPT_MARGIN:-180} : 60 )) --run-dir /tmp/optrun --max-units 1 \
        ${OPT_ARGS:-} > "$OUT/optimize.log" 2>&1; echo "optimize rc=$?"; tail -40 "$OUT/optimize.log"
      fi
      $SF export /tmp/optrun --out /tmp/optexport && cp /tmp/optexport/summary.json "$OUT/optimize_summary.json"
      $SF runs show /tmp/optrun --json > "$OUT/optimize_run.json"
      # the judges' memory per evaluation (idle level, peak, admission) from the ledger
      python3 benchmarks/judge_memory.py /tmp/optrun --json "$OUT/judge_memory.json" \
        > "$OUT/judge_memory.md" 2>&1; tail -25 "$OUT/judge_memory.md"
      # how busy the GPU's slot was during the run: exclusive (timings, baselines) and
      # shared (correctness trials) holds, from the slot's log
      for lg in "${SOLFORGE_SLOTS:-/tmp/solforge-slots}"/cuda_*.log; do
        [ -e "$lg" ] && python3 benchmarks/slot_log.py "$lg" --since "$OPT_T0" \
          --json "$OUT/slot_busy_$(basename "$lg" .log).json" | tail -12
      done
      # the whole run (ledger, solution files) and the export come back too
      tar czf "$OUT/optimize_run.tgz" -C /tmp optrun optexport 2>/dev/null ;;
    winners)
      # WINNERS="PROBLEM=SOLUTION ...": kept solutions judged again on fresh seeds
      # (WINNER_TRIALS, default 10), one records file for all of them
      done_ winners && continue; late winners && continue
      step winners
      for pair in ${WINNERS:-}; do
        timeout -k 10 $(left) $SF bench "${pair%%=*}" --solution "${pair#*=}" --device ${DEVICE:-cuda} \
          --trials ${WINNER_TRIALS:-10} --budget-ms 150 --json "/tmp/winner_${pair%%=*}.json" 2>&1 | tail -6
      done
      # (bench also writes winner_*.summary.json beside each records file: not records)
      python3 -c "import glob, json; print(json.dumps([r for f in sorted(glob.glob('/tmp/winner_*.json')) if not f.endswith('.summary.json') for r in json.load(open(f))]))" > "$OUT/winners.json"
      finished winners 0 ;;
    solunits)
      # the speed-of-light unit of each op family against what PyTorch's defaults run
      done_ solunits && continue; late solunits && continue
      step solunits
      # (its JSON lands in $OUT; the log only in the reply: a call brings back 8 files)
      set -o pipefail
      timeout -k 10 120 python3 benchmarks/gpu/check_sol_units.py 2>&1 | tail -40
      finished solunits $?; set +o pipefail ;;
    after:*)
      # wait (until DEADLINE) for the other stream to finish step ${s#after:}
      step "$s"
      while [ ! -e "$DONE/${s#after:}" ] && [ $(left) -gt 30 ]; do sleep 2; done ;;
    throughput)
      # TP_PARTS narrows benchmarks/throughput.py's parts (warm,busy,cuda); TP_TAG names a
      # second run on the same machine (e.g. with SOLFORGE_QUIET_DEVICE=1): its own files
      tp=throughput${TP_TAG:-}
      done_ $tp && continue; late $tp && continue
      step $tp
      timeout -k 10 $(left) python3 benchmarks/throughput.py --device ${DEVICE:-cuda} --workers 3 \
        --count ${TP_COUNT:-5} ${TP_PARTS:+--parts $TP_PARTS} --json "$OUT/$tp.json" > "$OUT/$tp.log" 2>&1
      rc=$?; tail -30 "$OUT/$tp.log"; finished $tp $rc ;;
    tpprofile)
      done_ tpprofile && continue; late tpprofile && continue
      step tpprofile
      python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .whl/py_spy-*.whl
      timeout -k 10 $(left) /tmp/pyspy/bin/py-spy record --subprocesses --nonblocking --rate 50 \
        --format raw -o "$OUT/tpprofile.txt" -- python3 benchmarks/throughput.py \
        --device ${DEVICE:-cuda} --parts warm --count ${TP_COUNT:-3} \
        --json "$OUT/throughput_profiled.json" > "$OUT/tpprofile.log" 2>&1
      rc=$?; tail -30 "$OUT/tpprofile.log"; finished tpprofile $rc ;;
    pack)
      # a call brings back 8 files of $OUT: more are packed into $OUT/all.tgz (the optimize
      # step alone writes 8; session 25's first call lost its run folder so)
      step pack
      n=$(find "$OUT" -maxdepth 1 -type f | wc -l)
      if [ "$n" -gt 8 ]; then
        (cd "$OUT" && tar czf /tmp/all.tgz --exclude=all.tgz . && find . -mindepth 1 -delete \
          && mv /tmp/all.tgz all.tgz) && echo "packed $n files into \$OUT/all.tgz"
      fi ;;
    *) echo "unknown step $s" ;;
  esac
done
step done
