#!/usr/bin/env bash
# One device call: two session.sh step lists side by side, one per GPU on a two-GPU
# machine, both on GPU 0 on a one-GPU machine (their timings still queue for its slot).
# Usage (from the repository root, on the GPU machine):
#   DEADLINE=520 bash benchmarks/gpu/dual.sh "STEPS FOR GPU 0" "STEPS FOR GPU 1"
# Per-GPU settings: REF_TARGET0/REF_TARGET1, OPT_GPUS0/OPT_GPUS1 (else the shared ones).
# Each list runs with CUDA_VISIBLE_DEVICES set to its GPU and its own results folder;
# both share $SOLFORGE_CACHE (device profile, baseline cache, inductor cache, done markers).
# Everything comes back as $OUT/results.tgz plus the two console logs.
set -u
export OUT=${OUT:-/tmp/out} SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
RES=/tmp/res; rm -rf $RES; mkdir -p $RES/gpu0 $RES/gpu1 "$OUT"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
for i in 0 1; do
  steps=$1; shift
  gpu=$i; [ "${NGPU:-0}" -lt 2 ] && gpu=0
  rt=REF_TARGET$i; og=OPT_GPUS$i
  ( export CUDA_VISIBLE_DEVICES=$gpu
    [ -n "${!rt:-}" ] && export REF_TARGET=${!rt}
    [ -n "${!og:-}" ] && { export GPUS=${!og}; unset CUDA_VISIBLE_DEVICES; }
    OUT=$RES/gpu$i timeout $(( ${DEADLINE:-570} + 25 )) bash benchmarks/gpu/session.sh $steps \
      > $RES/gpu$i/console.log 2>&1 ) &
done
wait
for i in 0 1; do cp $RES/gpu$i/console.log "$OUT/console$i.log"; done
tar czf "$OUT/results.tgz" -C $RES . && ls -la "$OUT"
for i in 0 1; do echo "##### GPU $i"; grep -E "^=== |passed|failed|pass rate|rc=" $RES/gpu$i/console.log | tail -25; done
