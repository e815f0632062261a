#!/usr/bin/env bash
# Reward throughput of `solforge serve` on one GPU: rewards per minute for a mixed batch.
# Usage (on the GPU machine, from the repository root; at most 7 minutes, about 5):
#   bash benchmarks/gpu/rl_throughput.sh
# Runs benchmarks/load_serve.py against a server on cuda:0 twice, SLOTS judges (default 2),
# 8 clients sending for a fixed time then waiting for their answers: every solution
# distinct (no verdict reused: the evaluator's own rate) for 130 s, then each source
# repeating (3 variants a kind: GRPO's duplicates, answered from the cache) for 50 s.
# Mixed batch: honest Triton and PyTorch, wrong outputs, PyTorch for a kernel task, three
# policy hacks, a segfault, an exception, a hang, an output flood, a secret stealer, a
# completion with no code (tiny_linear: its GPU workloads up to 4096^3, eager and
# torch.compile baselines). Results: $OUT/rl_throughput_{distinct,repeats}.json, serve logs.
# Needs the pydantic wheels in .whl/ (as session.sh) and the `rl` extra's server wheels
# there too: starlette, uvicorn, h11, anyio, idna, httpx, httpcore, certifi (and click when
# the image lacks it); `python3 -m pip download --no-deps -d .whl starlette==1.10.0
# uvicorn==0.55.0 h11==0.16.0 anyio==4.16.0 idna==3.20 httpx==0.29.0 httpcore==1.0.9
# certifi==2026.5.20 click==8.4.0`.
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" "$SOLFORGE_CACHE"
need() { python3 -c "import $1" 2>/dev/null && return 0; return 1; }
W=()
need pydantic || W+=(.whl/pydantic-2*.whl .whl/pydantic_core-*.whl .whl/annotated_types-0.7.0*.whl .whl/typing_inspection-0.4.2*.whl)
for m in starlette uvicorn h11 anyio idna httpx httpcore certifi click; do
  need $m || W+=(.whl/$m-*.whl)
done
if [ ${#W[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${W[@]}" || exit 3
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u; } > "$OUT/rl_env.txt" 2>&1
cat "$OUT/rl_env.txt"
SLOTS=${SLOTS:-2}
run() {  # NAME SOLUTIONS VARIANTS SECONDS KINDS: sends for SECONDS, then drains
  echo "=== $1"
  timeout -k 10 $(( $4 + 100 )) python3 benchmarks/load_serve.py --device cuda:0 \
    --slots "$SLOTS" --solutions "$2" --clients 8 --variants "$3" --seconds "$4" \
    --timeout 60 --trials 5 --budget-ms 0 --baselines eager,compile --kinds "$5" \
    --state "/tmp/rl_$1" --out "$OUT/rl_throughput_$1.json" > "$OUT/rl_$1.log" 2>&1
  echo "rc=$?"; cp "/tmp/rl_$1/serve.log" "$OUT/serve_$1.log" 2>/dev/null
  python3 - "$OUT/rl_throughput_$1.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("no result:", e); sys.exit(0)
print({k: d[k] for k in ("ok", "answers", "wall_s", "rewards_per_min", "evaluations",
                         "cache_hits", "latency_s_median")})
print("problems:", d["problems"][:10])
PY
}
# no hang on the GPU: each would hold a slot for its whole 60 s timeout (the rate of hangs,
# not of the evaluator; the CPU load test has them)
K=honest_triton,honest_pytorch,wrong_triton,pytorch_for_kernel,hack_no_kernel,hack_hidden_fallback,hack_calls_reference,crash_segfault,crash_raises,flood,steal_secrets,no_code
run distinct 400 100000 130 "$K"
run repeats 400 3 50 "$K"
