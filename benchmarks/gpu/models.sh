#!/usr/bin/env bash
# Issue 23 on the H200, one call (<= 8 minutes): a Llama-style and a Mixtral-style model built
# from config (random weights, bf16) are extracted (prefill and decode), their problems
# optimised by the search agent (the planner spends the wall budget by share of model
# time), the kept solutions patched into the live model and validated: drift, greedy-token
# agreement, end-to-end latency with and without the patch (interleaved), and the share of
# the model's time the patched problems cover. Results under $OUT/models/.
# Usage (on the GPU machine, from the repository root, .whl/ carried):
#   bash benchmarks/gpu/models.sh
# Knobs: MODELS ("llama mixtral"), LAYERS (2), SEQ (512), BATCH (1), OPT_WALL (seconds of
# `optimize` per model, 120), DEADLINE (seconds after start, 470), DEVICE (cuda; cpu with
# tiny SIZES_* for a dry run), GEN_STEPS (16), FROM (an earlier call's models.tgz: validate
# its exports again, nothing extracted or optimised), COMPILE=1 (the patched model under
# torch.compile's inductor too, one prefill: compile time, calls, difference from eager).
# Needs in .whl/: the pydantic wheels (as session.sh) and transformers 5.25.0 with each of
# its dependencies the image lacks (the loop below names a missing one). Here, with $P of
# benchmarks/gpu/PLAN.md ("Preparing the carried folders"), the closure (47 MB with numpy)
# goes to a side folder and all but pydantic's own wheels (pinned in .whl/) are copied:
#   python3 -m pip download $P -d /tmp/tf transformers==5.25.0
#   cp $(ls /tmp/tf/*.whl | grep -v -e /pydantic -e /annotated_types -e /typing_inspection) .whl/
set -u
export PYTHONUNBUFFERED=1 SOLFORGE_CACHE=${SOLFORGE_CACHE:-/tmp/sfcache}
export OUT=${OUT:-/tmp/out}
R=$OUT/models; mkdir -p "$R" "$SOLFORGE_CACHE"
T0=$(date +%s)
left() { local l=$(( ${DEADLINE:-470} - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
step() { echo "=== $1 ($(( $(date +%s) - T0 ))s)"; }
. benchmarks/gpu/lib.sh && ensure_pydantic || exit 3
# transformers and what the image lacks of its dependencies, each wheel installed without
# its dependencies (no resolver: the image's own packages stay as they are)
NEED=""
for pair in transformers:transformers huggingface_hub:huggingface_hub tokenizers:tokenizers \
    safetensors:safetensors hf_xet:hf_xet kernels:kernels regex:regex yaml:pyyaml tqdm:tqdm \
    numpy:numpy packaging:packaging filelock:filelock fsspec:fsspec httpx2:httpx2 \
    httpcore2:httpcore2 h11:h11 anyio:anyio idna:idna click:click tomlkit:tomlkit \
    typing_extensions:typing_extensions typer:typer shellingham:shellingham \
    annotated_doc:annotated_doc rich:rich markdown_it:markdown_it_py mdurl:mdurl \
    pygments:pygments truststore:truststore; do
  mod=${pair%%:*}; whl=${pair##*:}
  python3 -c "import $mod" 2>/dev/null && continue
  f=$(ls .whl/${whl}-*.whl 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "=== $mod is missing and .whl/ has no ${whl}-*.whl (see the header)"; exit 3; }
  NEED="$NEED $f"
done
if [ -n "$NEED" ]; then
  step "install from .whl/:$NEED"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $NEED || exit 3
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
SF="python3 -m solforge.cli.main"
DEVICE=${DEVICE:-cuda}
LAYERS=${LAYERS:-2}; SEQ=${SEQ:-512}; BATCH=${BATCH:-1}
# Llama 3 8B's widths; a Mixtral with 8 experts, top-2, at half of 8x7B's width (its experts
# are built and initialised on the host by every evaluation of the MoE problems); LAYERS layers
SIZES_llama=${SIZES_llama:-"--set hidden_size=4096 --set intermediate_size=14336 --set num_attention_heads=32 --set num_key_value_heads=8 --set vocab_size=128256 --set max_position_embeddings=8192"}
SIZES_mixtral=${SIZES_mixtral:-"--set hidden_size=2048 --set intermediate_size=7168 --set num_attention_heads=16 --set num_key_value_heads=8 --set vocab_size=32000 --set num_local_experts=8 --set num_experts_per_tok=2"}
SIZES_qwen2=${SIZES_qwen2:-"--set hidden_size=3584 --set intermediate_size=18944 --set num_attention_heads=28 --set num_key_value_heads=4 --set vocab_size=152064"}
{ nvidia-smi --query-gpu=name,driver_version --format=csv 2>/dev/null
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } > "$R/env.txt" 2>&1
cat "$R/env.txt"
# FROM=an earlier call's models.tgz: its exports are validated again (no extract, no
# optimize: a minute or two per model), e.g. after a change of apply or validate
if [ -n "${FROM:-}" ]; then
  tar -xzf "$FROM" -C "$OUT" || { echo "=== FROM=$FROM: not a models.tgz"; exit 3; }
fi
for M in ${MODELS:-llama mixtral}; do
  S=SIZES_$M; SIZES=${!S}
  COMMON="$SIZES --layers $LAYERS --dtype bfloat16 --device $DEVICE"
  SRC="$R/$M/run"
  if [ -n "${FROM:-}" ]; then
    [ -d "$R/$M/export" ] || { echo "=== $FROM holds no $M/export"; continue; }
    SRC="$R/$M/export"
  else
    step "extract $M"
    timeout -k 5 $(left) $SF extract $M --out "$R/$M/problems" --name $M $COMMON --prefill --decode \
      --batch $BATCH --seq $SEQ 2>&1 | tail -25
    [ -f "$R/$M/problems/extract.json" ] || { echo "=== extract $M failed"; continue; }
    WALL=${OPT_WALL:-120}; [ "$(left)" -lt $(( WALL + 130 )) ] && WALL=$(( $(left) - 130 ))
    if [ "$WALL" -gt 20 ]; then
      step "optimize $M (${WALL}s of wall budget)"
      timeout -k 10 $(( WALL + 100 )) $SF optimize "$R/$M/problems" --device $DEVICE --run-dir "$R/$M/run" \
        --budget-wall-s $WALL --max-units 1 --max-candidates 6 --search-seconds 60 \
        --compile-seconds 60 --explore-max-calls 20 --budget-ms 200 ${OPT_ARGS:-} > "$R/$M/optimize.log" 2>&1
      echo "rc=$?"; tail -6 "$R/$M/optimize.log"
      $SF runs show "$R/$M/run" --json > "$R/$M/run.json" 2>/dev/null
      $SF export "$R/$M/run" --out "$R/$M/export" > /dev/null 2>&1
    fi
  fi
  [ -d "$SRC" ] || continue
  step "validate $M ($SRC)"
  timeout -k 5 $(left) $SF validate $M "$SRC" $COMMON --prefill --decode --batch $BATCH --seq $SEQ \
    --gen-steps ${GEN_STEPS:-16} --rounds 5 --json "$R/$M/validate.json" 2>&1 | tail -40
  if [ "${COMPILE:-0}" = 1 ] && [ "$(left)" -gt 90 ]; then
    step "torch.compile $M (patched, inductor)"
    timeout -k 5 $(left) python3 - "$M" "$SRC" "$R/$M/compile.json" $SEQ $BATCH $SIZES --layers $LAYERS <<'PY' 2>&1 | tail -8
import json, sys, time, torch
import solforge
from solforge.models.source import build_model, parse_overrides
m, run, out, seq, batch, *rest = sys.argv[1:]
sets = [rest[i + 1] for i in range(len(rest)) if rest[i] == "--set"]
over = parse_overrides(sets) | {"num_hidden_layers": int(rest[rest.index("--layers") + 1])}
import os
dev = os.environ.get("DEVICE", "cuda")
b = build_model(m, over, getattr(torch, os.environ.get("DTYPE", "bfloat16")), dev)
patch = solforge.apply(b.model, run)
x = b.inputs("prefill", int(batch), int(seq))
with torch.no_grad():
    eager = b.model(**x).logits
    patch.reset_stats()
    t = time.perf_counter()
    compiled = torch.compile(b.model)(**x).logits
    if dev == "cuda":
        torch.cuda.synchronize()
res = {"compile_s": time.perf_counter() - t, "calls": patch.stats(),
       "max_abs_diff_vs_eager_patched": float((compiled.float() - eager.float()).abs().max())}
json.dump(res, open(out, "w"), indent=1)
print(json.dumps(res)[:600])
PY
  fi
done
step "summary"
python3 - "$R" <<'PY' | tee "$R/summary.json"
import json, sys
from pathlib import Path
root, out = Path(sys.argv[1]), {}
for d in sorted(p for p in root.iterdir() if p.is_dir()):
    m = {}
    ex = d / "problems" / "extract.json"
    if ex.is_file():
        e = json.loads(ex.read_text())
        m["steps_ms"] = {k: v["ms"] for k, v in e["steps"].items()}
        m["covered_share_extracted"] = e["covered_share"]
        m["problems"] = {p["name"]: p["share"] for p in e["problems"]}
    run = d / "run.json"
    if run.is_file():
        r = json.loads(run.read_text())
        m["optimized"] = {p["name"]: (p["best"] or {}).get("speedup_vs_eager")
                          for p in r["problems"] if p["attempts"]}
    v = d / "validate.json"
    if v.is_file():
        r = json.loads(v.read_text())
        m["latency"] = r["latency"]
        m["drift"] = r["drift"]
        m["generation"] = r.get("generation")
        m["share_patched"] = r.get("share_patched")
        m["per_module"] = {k: {"lowered_precision": x["lowered_precision"],
                               "kl_mean": {s: y.get("kl_mean") for s, y in x["drift"].items()}}
                           for k, x in r["per_module"].items()}
        m["calls"] = {k: (c["patched"], c["fallback"]) for k, c in r["calls"].items()}
        m["module_costs"] = r.get("module_costs")
    out[d.name] = m
print(json.dumps(out, indent=1))
PY
step done
