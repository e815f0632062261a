#!/usr/bin/env bash
# `solforge ci` on the H200, in one call: the kept kernels of session 10's whole-corpus run
# (benchmarks/results/2026-12-02-h200-s10/optimize_run-call6.tgz) for a few problems, gated
# three times: a baseline measured (--update-baseline), the unchanged export against it
# (must pass: what the rounds' spread is on a GPU), and an export where one kernel calls its
# forward twice (slower) and another returns twice its answer plus one (wrong): must fail
# on both.
# Usage (on the GPU machine, from the repository root):
#   OUT=/tmp/out bash benchmarks/gpu/ci_gate.sh
# PROBLEMS (space-separated) picks the problems; DEADLINE (s, default 540) bounds the call.
# Results under $OUT: baseline.json, {0,1,2}.xml/.md (JUnit, summary), ci-*.log, rc.txt.
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
export PYTHONPATH=$PWD:${PYTHONPATH:-}
SF="python3 -m solforge.cli.main"
T0=$(date +%s)
left() { local l=$(( ${DEADLINE:-540} - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
PROBLEMS=${PROBLEMS:-"rmsnorm_llama3 linear_fp32_vit_mlp softmax_logits_fp32"}
WORK=$(mktemp -d)
tar xzf benchmarks/results/2026-12-02-h200-s10/optimize_run-call6.tgz -C "$WORK" optexport
mkdir -p "$WORK/kept"/{solutions,records,problems} "$WORK/changed"/{solutions,records,problems}
for p in $PROBLEMS; do
  for d in kept changed; do
    for sub in solutions records problems; do
      ext=py; [ $sub = records ] && ext=json
      cp "$WORK/optexport/$sub/$p.$ext" "$WORK/$d/$sub/$p.$ext"
    done
  done
done
set -- $PROBLEMS
slow=$1; wrong=$2
cat >> "$WORK/changed/solutions/$slow.py" <<'PY'


_Kept = ModelNew


class ModelNew(_Kept):  # the same answer, computed twice: about twice as slow
    def forward(self, *args, **kwargs):
        super().forward(*args, **kwargs)
        return super().forward(*args, **kwargs)
PY
cat >> "$WORK/changed/solutions/$wrong.py" <<'PY'


_Kept = ModelNew


class ModelNew(_Kept):  # twice the answer plus one: wrong under any tolerance
    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs) * 2 + 1
PY
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
: > "$OUT/rc.txt"
i=0
for args in "$WORK/kept --update-baseline" "$WORK/kept" "$WORK/changed"; do
  echo "=== ci $i ($(( $(date +%s) - T0 ))s): $args"
  timeout $(left) $SF ci $args --baseline "$OUT/baseline.json" --device "${DEVICE:-cuda}" \
    --junit "$OUT/$i.xml" --summary "$OUT/$i.md" > "$OUT/ci-$i.log" 2>&1
  echo "ci $i rc=$?" | tee -a "$OUT/rc.txt"
  i=$((i + 1))
done
echo "expected: ci 0 rc=0, ci 1 rc=0, ci 2 rc=1 (slowdown: $slow, correctness: $wrong)" >> "$OUT/rc.txt"
rm -rf "$WORK"
