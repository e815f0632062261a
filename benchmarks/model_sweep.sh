#!/usr/bin/env bash
# The model round trip over many transformers model types, on a CPU, at tiny sizes: for each,
# `solforge extract` (prefill and decode where there is a KV cache, else prefill), `solforge
# bench` of every extracted problem against its own reference, then (APPLY=1) `optimize`
# with the reference family (a kept solution per problem) and `validate` (apply, drift,
# latency, module costs). What it finds is what a user with a model we did not write meets.
# Usage (from the repository root; transformers installed):
#   bash benchmarks/model_sweep.sh [TYPE ...]        # default: the list below
#   APPLY=1 bash benchmarks/model_sweep.sh gpt2 t5   # the round trip too
# Out: $OUT (default /tmp/model_sweep): <type>/ (problems), <type>.log, bench_<type>.json,
# summary.txt (a line per step and type). Knobs: OUT, SEQ (16), LAYERS (2), TIMEOUT (s per
# command, 900).
set -u
OUT=${OUT:-/tmp/model_sweep}; SEQ=${SEQ:-16}; LAYERS=${LAYERS:-2}; TIMEOUT=${TIMEOUT:-900}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:${PYTHONPATH:-}
SF="python3 -m solforge.cli.main"
TYPES=${*:-"llama qwen2 qwen3 mistral mixtral gemma2 gemma3_text olmo2 granite phi3 phi
  qwen2_moe qwen3_moe starcoder2 gpt_neox gpt2 opt bloom cohere stablelm falcon bert roberta
  t5 vit clip whisper deepseek_v3"}
BASE="--set hidden_size=64 --set intermediate_size=128 --set num_attention_heads=4
  --set num_key_value_heads=2 --set vocab_size=256 --set max_position_embeddings=256"
sets() {  # the sizes that shrink TYPE (each type's own keys where the common ones miss)
  case $1 in
    falcon) echo "${BASE}" ;;   # head_dim is a property there
    whisper) echo "${BASE} --set d_model=64 --set encoder_layers=1 --set decoder_layers=1
      --set encoder_attention_heads=4 --set decoder_attention_heads=4
      --set max_source_positions=64 --set encoder_ffn_dim=128 --set decoder_ffn_dim=128" ;;
    deepseek_v3) echo "${BASE/num_key_value_heads=2/num_key_value_heads=4}
      --set qk_rope_head_dim=8 --set qk_nope_head_dim=16 --set v_head_dim=16
      --set kv_lora_rank=32 --set q_lora_rank=48 --set n_routed_experts=8
      --set moe_intermediate_size=32 --set first_k_dense_replace=1
      --set num_experts_per_tok=2 --set n_group=2 --set topk_group=1" ;;
    *) echo "${BASE} --set head_dim=16" ;;
  esac
}
line() { echo "$*" | tee -a "$OUT/summary.txt"; }
for M in $TYPES; do
  S=$(sets "$M"); rm -rf "${OUT:?}/$M"
  MODES="--prefill --decode"
  timeout "$TIMEOUT" $SF extract "$M" --out "$OUT/$M" $S --layers "$LAYERS" $MODES --seq "$SEQ" \
    > "$OUT/$M.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q -- "--decode" "$OUT/$M.log"; then  # no KV cache: prefill alone
    MODES="--prefill"
    timeout "$TIMEOUT" $SF extract "$M" --out "$OUT/$M" $S --layers "$LAYERS" $MODES \
      --seq "$SEQ" > "$OUT/$M.log" 2>&1
    rc=$?
  fi
  line "$M extract rc=$rc problems=$(ls "$OUT/$M"/*.py 2>/dev/null | wc -l) $(tail -1 "$OUT/$M.log" | cut -c1-160)"
  [ $rc -eq 0 ] || continue
  timeout "$TIMEOUT" $SF bench "$OUT/$M" --solution reference --device cpu --trials 1 \
    --baselines eager --budget-ms 20 --json "$OUT/bench_$M.json" > "$OUT/bench_$M.log" 2>&1
  line "$M bench rc=$? $(tail -1 "$OUT/bench_$M.log" | cut -c1-120)"
  [ "${APPLY:-0}" = 1 ] || continue
  rm -rf "${OUT:?}/run_$M"
  timeout "$TIMEOUT" $SF optimize "$OUT/$M" --run-dir "$OUT/run_$M" --families reference \
    --max-candidates 1 --max-units 40 --baselines eager --budget-ms 20 \
    --explore-max-calls 10 > "$OUT/opt_$M.log" 2>&1
  line "$M optimize rc=$? $(grep -E 'passed;' "$OUT/opt_$M.log" | tail -1 | cut -c1-100)"
  timeout "$TIMEOUT" $SF validate "$M" "$OUT/run_$M" $S --layers "$LAYERS" $MODES --seq "$SEQ" \
    --rounds 1 --gen-steps 4 --json "$OUT/val_$M.json" > "$OUT/val_$M.log" 2>&1
  line "$M validate rc=$? $(grep -E '^calls:' "$OUT/val_$M.log" | cut -c1-90)"
done
