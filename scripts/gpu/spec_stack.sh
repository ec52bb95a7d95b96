#!/bin/bash
# scripts/gpu/spec_stack.sh — issue 25's speed targets on the trained hybrid demo (tests/golden/demo35):
# the whole stack (redis + gantry-engine serve --device cuda + gantry-router, scripts/gpu/stack.sh), raw
# completions of its held-out prompts (scripts/gpu/demo35_dataset.py: edit and completion workloads,
# greedy, OUTPUT_LEN tokens each), at concurrency $CONC, for speculation off / mtp / ngram with K drafts;
# prints per run the bench table (per-user tok/s from the median inter-token interval, tpot, acc_len from
# the engine's /metrics) and a summary of decode tok/s relative to off.
# Here:   STACK=1 TARGETS="gantry-engine" scripts/gpu/pack.sh; sh scripts/gpu/slim.sh hide stack
# Device: bash scripts/gpu/spec_stack.sh   (carry build-cuda-stack; ~3-4 min)
# Env: OUT (default /tmp/gpu-spec-stack), K (3), CONC (1,8,32), OUTPUT_LEN (128), MODES ("off mtp ngram";
# MODE:K sets that run's drafts, e.g. "ngram:6"; ngram0 is ngram without the suffix cache across requests, mtp0
# the MTP block alone (no prompt lookup, no suffix cache); the cache
# matters here: each prompt runs twice per cell, and every cell runs the same prompts),
# WORKLOADS ("edit completion"), COPIES (2: each prompt twice per cell; 1: every request a new prompt), TEMP (0: greedy), ENGINE_ARGS (extra serve options for every run).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
OUT=${OUT:-/tmp/gpu-spec-stack} K=${K:-3}
M=$(ls "$SRC"/tests/golden/demo35/gantry-demo35-code-*.gguf 2>/dev/null | head -1)
[ -s "$M" ] || { echo "== spec_stack: no demo35 model in tests/golden/demo35 (slim.sh hid it?)"; exit 1; }
mkdir -p "$OUT"
DATA=$OUT/data
python3 scripts/gpu/demo35_dataset.py "$DATA" "${OUTPUT_LEN:-128}" "${COPIES:-2}" || exit 1
for w in ${WORKLOADS:-edit completion}; do
  for mk in ${MODES:-off mtp ngram}; do
    mode=${mk%%:*} k=$K # MODE or MODE:K (e.g. ngram:6)
    case $mk in *:*) k=${mk#*:} ;; esac
    [ "$mode" = off ] && k=
    case $mode in # ngram0: prompt lookup without the suffix cache; mtp0: the MTP block alone (no lookup, no cache)
      ngram0) a="--speculative ngram --spec-suffix-cache 0" ;;
      mtp0) a="--speculative mtp --spec-mtp-lookup off --spec-suffix-cache 0" ;;
      *) a="--speculative $mode" ;;
    esac
    [ "$mode" = off ] || a="$a --num-speculative-tokens $k"
    echo "=== $w, speculative $mode${k:+ k $k}"
    OUT="$OUT/$w-$mode$k" CONTEXTS=512 CONC=${CONC:-1,8,32} SPEC_METRICS=1 ENGINE_ARGS="$a ${ENGINE_ARGS:-}" \
      BENCH_ARGS="--dataset $DATA/$w.jsonl --completions --temperature ${TEMP:-0}" bash scripts/gpu/stack.sh "$M" demo35 \
      >"$OUT/$w-$mode$k.txt" 2>&1
    echo "rc=$?"
    grep -E "^(target|default) |graphs|eager_steps" "$OUT/$w-$mode$k.txt" | head -16
  done
done
