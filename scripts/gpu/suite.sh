#!/bin/bash
# On the GPU machine, from the repository root, after scripts/gpu/pack.sh (default TARGETS)
# with build-cuda-pack carried along; builds nothing:
#   1. the GPU correctness tests (scripts/gpu/run_tests.sh: test_cuda_ops, test_cuda_golden,
#      test_cuda_sample, test_cuda_kvmem, ... when packed: the list in gpu_tests.sh);
#   2. for each model of MODELS: gantry-mkmodel (kept in $MODELDIR for later calls on the same
#      machine; all models generated in the background while the tests run), then bench_decode --batch $BATCH --prompt $PROMPT --gen $GEN (engine/models/bench.h
#      table, prefill per PROMPT length, the per-op profile of one decode step per batch size); at the
#      end one combined table (decode per batch size, prefill per length, % of roofline) and the
#      largest ops of the first and last batch size's profile per model;
#   3. SERVE=1: gantry-engine serve --device cuda on the demo model, one gRPC Generate through
#      engine-bench --target, then /metrics: gantry_engine_eager_steps_total must be 0;
#   4. STACK=1 (pack with STACK=1): the serving path, scripts/gpu/stack.sh, per STACK_MODELS entry;
#      LONG=1: the long-context table (512 / 8K / 28K / 64K prompts, eight 28K users) through the stack.
# Env: TESTS=0 / BENCH=0 / MICRO=0 skip 1 / 2 / the kernel microbenchmarks (bench_matvec,
# bench_gdn_scan, bench_attn, run after the tests when packed); MODELS (default "qwen3-8b:bf16 qwen3-8b:Q4_K_M
# qwen35-9b:Q4_K_M"; qwen35 Q4_K_M keeps a BF16 head); BATCH (1,8,32), PROMPT (512,2048: decode after the
# first, each timed as a prefill), GEN (256);
# OUT (logs, default /tmp/gpu-suite); BENCH_MATVEC_ARGS (e.g. "--types Q4_K,Q6_K --reps 20"),
# MICRO_TIMEOUT (180 s per microbenchmark). Exit 1 when a step failed.
# Wall time on one H200 (a device call allows 600 s): tests ~1 min; mkmodel up to ~90 s per
# model (qwen35-9b Q4_K_M); bench_decode 1,8,32 x 256 steps ~1-2 min per model: run one or two
# models per call, e.g. MODELS=qwen3-8b:bf16 TESTS=0.
set -u
SRC=${GANTRY_SRC_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)} # GANTRY_SRC_ROOT: a copy run from elsewhere
cd "$SRC" || exit 1
D=${DIST:-$SRC/build-cuda-dist} # DIST=build-x DEVICE=cpu: the SERVE part against a local build
[ -z "${DIST:-}" ] && [ -f build-cuda-pack/dist.tar.xz ] && [ ! -x "$D/bench_decode" ] && tar xJf build-cuda-pack/dist.tar.xz
# the stack programs' own pack (scripts/gpu/pack.sh STACK=1), unpacked over the CUDA programs
[ -z "${DIST:-}" ] && [ -f build-cuda-stack/stack.tar.xz ] && [ ! -x "$D/gantry-router" ] && tar xJf build-cuda-stack/stack.tar.xz
OUT=${OUT:-/tmp/gpu-suite}
MODELDIR=${MODELDIR:-/tmp}
mkdir -p "$OUT" "$MODELDIR"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$SRC/tests/golden"
BATCH=${BATCH:-1,8,32} PROMPT=${PROMPT:-512,2048} GEN=${GEN:-256}
MODELS=${MODELS:-"qwen3-8b:bf16 qwen3-8b:Q4_K_M qwen35-9b:Q4_K_M"}
STACK_MODELS=${STACK_MODELS:-qwen3-8b:Q4_K_M} LONG_MODEL=${LONG_MODEL:-qwen35-9b:Q4_K_M}
rc=0

# gantry-mkmodel of one model (preset, type) into $MODELDIR (kept for later calls on the same machine);
# started for every model before the tests so that generation (CPU) overlaps them (GPU)
mk_model() {
  preset=$1 type=$2 m=$MODELDIR/$1.$2.gguf
  [ -s "$m" ] && return 0
  keep=
  case "$preset:$type" in qwen35*:Q4_K_M) keep=--keep-output-bf16 ;; esac
  t0=$(date +%s)
  if timeout "${MKMODEL_TIMEOUT:-300}" "$D/gantry-mkmodel" --preset "$preset" --type "$type" $keep --out "$m.tmp" \
      --threads "$MK_THREADS" >"$OUT/mkmodel.$preset.$type.txt" 2>&1; then
    mv "$m.tmp" "$m"
    echo "$(($(date +%s) - t0)) s" >"$OUT/mkmodel.$preset.$type.done"
  else
    rm -f "$m.tmp"
    echo failed >"$OUT/mkmodel.$preset.$type.done"
  fi
}
wait_model() {
  while [ ! -s "$MODELDIR/$1.$2.gguf" ] && ! grep -qs failed "$OUT/mkmodel.$1.$2.done"; do sleep 1; done
  if [ -s "$MODELDIR/$1.$2.gguf" ]; then
    echo "== mkmodel $1:$2: $(cat "$OUT/mkmodel.$1.$2.done" 2>/dev/null || echo cached)"
    return 0
  fi
  echo "== mkmodel $1:$2 FAILED ($OUT/mkmodel.$1.$2.txt)"
  return 1
}
# every model a part of this run needs (BENCH's MODELS, STACK's STACK_MODELS, LONG's LONG_MODEL),
# each once, all generated at once in the background (the threads split among them)
ALL_SPECS=
[ "${BENCH:-1}" = 1 ] && ALL_SPECS="$MODELS"
[ "${STACK:-0}" = 1 ] && ALL_SPECS="$ALL_SPECS $STACK_MODELS"
[ "${LONG:-0}" = 1 ] && ALL_SPECS="$ALL_SPECS $LONG_MODEL"
ALL_SPECS=$(printf '%s\n' $ALL_SPECS | awk 'NF && !seen[$0]++' | tr '\n' ' ')
n_models=$(echo $ALL_SPECS | wc -w)
MK_THREADS=$(( $(nproc) / (n_models > 0 ? n_models : 1) ))
[ "$MK_THREADS" -ge 1 ] || MK_THREADS=1
for spec in $ALL_SPECS; do rm -f "$OUT/mkmodel.${spec%%:*}.${spec#*:}.done"; mk_model "${spec%%:*}" "${spec#*:}" & done

if [ "${TESTS:-1}" = 1 ]; then
  OUT=$OUT timeout "${TESTS_TIMEOUT:-240}" sh scripts/gpu/run_tests.sh >"$OUT/tests.txt" 2>&1
  r=$?
  echo "== tests rc=$r (log $OUT/tests.txt)"
  grep -E "^== |FAIL|graphs:|rc=" "$OUT/tests.txt" | head -40
  [ $r -eq 0 ] || rc=1
fi

# kernel microbenchmarks (validate, then time) when packed
if [ "${MICRO:-1}" = 1 ]; then
  for mb in bench_matvec bench_gdn_scan bench_attn; do
    [ -x "$D/$mb" ] || continue
    args=
    [ "$mb" = bench_matvec ] && args=${BENCH_MATVEC_ARGS:-}
    timeout "${MICRO_TIMEOUT:-180}" "$D/$mb" $args >"$OUT/$mb.txt" 2>&1
    r=$?
    echo "== $mb rc=$r (log $OUT/$mb.txt)"
    [ $r -eq 0 ] || rc=1
  done
fi

if [ "${BENCH:-1}" = 1 ]; then
  for spec in $MODELS; do
    preset=${spec%%:*} type=${spec#*:}
    m=$MODELDIR/$preset.$type.gguf
    if ! wait_model "$preset" "$type"; then
      rc=1
      continue
    fi
    log=$OUT/bench.$preset.$type.txt
    timeout "${BENCH_TIMEOUT:-300}" "$D/bench_decode" --model "$m" --batch "$BATCH" --prompt "$PROMPT" --gen "$GEN" \
      >"$log" 2>&1
    r=$?
    echo "== bench $spec rc=$r (log $log)"
    cat "$log"
    [ $r -eq 0 ] || rc=1
  done
  echo
  echo "== combined ($(cat "$D/COMMIT" 2>/dev/null || echo "commit unknown"); bench_decode --batch $BATCH --prompt $PROMPT --gen $GEN)"
  hdr="| model"
  for b in $(echo "$BATCH" | tr , ' '); do hdr="$hdr | b$b ms/step | b$b tok/s | b$b % roofline"; done
  for p in $(echo "$PROMPT" | tr , ' '); do hdr="$hdr | prefill $p tok/s"; done
  echo "$hdr |"
  for spec in $MODELS; do
    preset=${spec%%:*} type=${spec#*:}
    log=$OUT/bench.$preset.$type.txt
    [ -f "$log" ] || continue
    row="| $preset $type"
    for b in $(echo "$BATCH" | tr , ' '); do
      row="$row | $(awk -F'|' -v b="$b" 'NF == 13 && $2 + 0 == b && $2 ~ /[0-9]/ {gsub(/ /, "", $4); gsub(/ /, "", $6); gsub(/^ +| +$/, "", $10); print $4 " | " $6 " | " $10; exit}' "$log")"
    done
    for p in $(echo "$PROMPT" | tr , ' '); do
      row="$row | $(awk -F'|' -v p="$p" 'NF == 5 && $2 + 0 == p && $2 ~ /[0-9]/ {gsub(/ /, "", $4); print $4; exit}' "$log")"
    done
    echo "$row |"
  done
  # per-op share of the first and the last batch size: the 8 largest ops of each profile
  b_first=${BATCH%%,*} b_last=${BATCH##*,}
  for spec in $MODELS; do
    preset=${spec%%:*} type=${spec#*:}
    log=$OUT/bench.$preset.$type.txt
    [ -f "$log" ] || continue
    for b in $b_first $b_last; do
      echo "-- $preset $type batch $b, largest ops (% of the step):"
      awk -v b="$b" '/^batch [0-9]+, one decode step/ {on = ($2 + 0 == b); next} on && /^\| [^o-]/ && !/gap|overhead|labels/ {print} on && /^sum of ops/ {print; on = 0}' "$log" |
        sort -t'|' -k4 -g -r | head -9
    done
  done
fi

if [ "${SERVE:-0}" = 1 ]; then
  M=${SERVE_MODEL:-tests/golden/demo/gantry-demo-code-22m.Q4_K_M.gguf}
  so=$OUT/serve.out se=$OUT/serve.err
  "$D/gantry-engine" serve --model "$M" --device "${DEVICE:-cuda}" --listen 127.0.0.1:0 --metrics-host 127.0.0.1 \
    --metrics-port 0 --max-num-seqs "${SEQS:-32}" --max-model-len "${MAX_LEN:-2048}" >"$so" 2>"$se" &
  pid=$!
  gp= mp=
  for _ in $(seq 1 240); do
    line=$(grep -m1 '^ready ' "$so" 2>/dev/null)
    if [ -n "$line" ]; then
      gp=$(echo "$line" | sed -n 's/.*grpc_port=\([0-9]*\).*/\1/p')
      mp=$(echo "$line" | sed -n 's/.*metrics_port=\([0-9]*\).*/\1/p')
      break
    fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  if [ -z "$gp" ]; then
    echo "== serve did not start (log $se)"
    tail -20 "$se"
    rc=1
  else
    grep -E "graphs: captured|warm-up" "$se"
    timeout 120 "$D/engine-bench" --target "127.0.0.1:$gp" --tokens "${SERVE_TOKENS:-64}" --conc "${SERVE_CONC:-1}"
    r=$?
    echo "== serve generate rc=$r"
    [ $r -eq 0 ] || rc=1
    if command -v curl >/dev/null; then
      metrics=$(env -u LD_LIBRARY_PATH curl -s "http://127.0.0.1:$mp/metrics") # not with the packed libs
    else
      exec 3<>"/dev/tcp/127.0.0.1/$mp" && printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3 && metrics=$(cat <&3)
      exec 3>&-
    fi
    echo "$metrics" | grep -E "^gantry_engine_(eager_steps_total|steps_total|generation_tokens_total)" | head
    eager=$(echo "$metrics" | awk '/^gantry_engine_eager_steps_total/ {print $2}')
    echo "== serve eager steps: ${eager:-missing} (must be 0)"
    [ "${eager:-x}" = 0 ] || rc=1
  fi
  kill -TERM $pid 2>/dev/null
  wait $pid
  echo "== serve exit rc=$? (log $se)"
fi

# STACK=1 (pack with STACK=1): the serving path on the GPU for each STACK_MODELS entry
# (default qwen3-8b:Q4_K_M, generated like MODELS): scripts/gpu/stack.sh (redis + router +
# serve --device cuda + gantry bench, contexts 512/2048, concurrency 1/8/32, cold and warm)
if [ "${STACK:-0}" = 1 ]; then
  for spec in $STACK_MODELS; do
    preset=${spec%%:*} type=${spec#*:}
    wait_model "$preset" "$type" || { rc=1; continue; }
    echo "== stack $spec"
    DIST=$D OUT=$OUT/stack.$preset.$type bash scripts/gpu/stack.sh "$MODELDIR/$preset.$type.gguf" "$preset" || rc=1
  done
fi

# LONG=1 (pack with STACK=1): issue 17's long-context table through the whole stack, LONG_MODEL
# (default qwen35-9b:Q4_K_M): `serve --max-num-seqs 8 --max-model-len 32768` (the default KV pool)
# with contexts LONG_CTX (512 / 8192 / 28000: 512 is the short-prompt decode that 28K is set against)
# at concurrency LONG_CONC (1, 8: eight 28K users at once), then (LONG64=0: not) a 64K prompt
# alone (`--max-num-seqs 1 --max-model-len 65600`); cold and warm TTFT, per-user decode.
# LONG_TOKENS (64 generated per request), LONG_TIMEOUT (420 s per stack.sh bench), LONG64_LEN
# (65600) and LONG64_CTX (64000) for the 64K run.
if [ "${LONG:-0}" = 1 ]; then
  spec=$LONG_MODEL LONG_CTX=${LONG_CTX:-512,8192,28000} LONG_CONC=${LONG_CONC:-1,8}
  preset=${spec%%:*} type=${spec#*:}
  if wait_model "$preset" "$type"; then
    echo "== long $spec: $LONG_CTX x concurrency $LONG_CONC"
    DIST=$D OUT=$OUT/long.$preset SEQS=8 MAX_LEN=32768 CONTEXTS=$LONG_CTX CONC=$LONG_CONC MAX_TOKENS=${LONG_TOKENS:-64} \
      BENCH_TIMEOUT=${LONG_TIMEOUT:-420} bash scripts/gpu/stack.sh "$MODELDIR/$preset.$type.gguf" "$preset" || rc=1
    if [ "${LONG64:-1}" = 1 ]; then # LONG64=0: without the 64K prompt
      echo "== long $spec: 64K alone"
      DIST=$D OUT=$OUT/long64.$preset SEQS=1 MAX_LEN=${LONG64_LEN:-65600} CONTEXTS=${LONG64_CTX:-64000} CONC=1 MAX_TOKENS=${LONG_TOKENS:-64} \
        BENCH_TIMEOUT=${LONG_TIMEOUT:-420} bash scripts/gpu/stack.sh "$MODELDIR/$preset.$type.gguf" "$preset" || rc=1
    fi
  else
    rc=1
  fi
fi
exit $rc
