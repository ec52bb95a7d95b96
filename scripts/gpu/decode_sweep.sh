#!/bin/bash
# On the GPU machine, from the repository root, with build-cuda-pack (and, for the stutter part,
# nothing more: engine-bench is in the default pack) carried: the issue-24 device call in one go.
#   1. gantry-mkmodel in the background: qwen3-8b Q4_K_M, qwen35-9b Q4_K_M (BF16 head) and
#      qwen35-27b Q4_K_M at $L27 layers (default 16: every product shape of the 27B, a quarter of
#      its file; per-op times are per call, prefill tok/s is that of the shortened model);
#   2. the GPU tests (scripts/gpu/run_tests.sh) while the models are made (TESTS=0 skips);
#   3. the hybrid stutter: gantry-engine serve --device cuda on qwen35-9b with
#      GANTRY_LOG_SLOW_STEP_MS, one greedy stream of $STUTTER_TOKENS tokens through gRPC
#      (engine-bench --target: itl p50 / p99 / max), the slow-step log lines and the graph
#      capture / eager counters from /metrics; the same on qwen3-8b as the control;
#   4. bench_decode qwen3-8b --batch $BATCH (default 1,8,32,64,128,256): graphs past 32;
#   5. bench_decode on the shortened qwen35-27b: prefill 512 / 2048 and the per-op profile.
# Logs in $OUT (default /tmp/decode-sweep); stdout carries the tables.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
D=$SRC/build-cuda-dist
[ -f build-cuda-pack/dist.tar.xz ] && [ ! -x "$D/bench_decode" ] && tar xJf build-cuda-pack/dist.tar.xz
OUT=${OUT:-/tmp/decode-sweep}
MD=${MODELDIR:-/tmp}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$SRC/tests/golden"
L27=${L27:-16} BATCH=${BATCH:-1,8,32,64,128,256} STUTTER_TOKENS=${STUTTER_TOKENS:-1500}
cat "$D/COMMIT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader

mk() { # preset type file threads [extra args]
  [ -s "$MD/$3" ] && return 0
  "$D/gantry-mkmodel" --preset "$1" --type "$2" --out "$MD/$3.tmp" --threads "$4" ${5:-} >"$OUT/mk.$3.txt" 2>&1 &&
    mv "$MD/$3.tmp" "$MD/$3"
}
mk qwen3-8b Q4_K_M q8b.gguf 5 &
p1=$!
mk qwen35-9b Q4_K_M q9b.gguf 5 --keep-output-bf16 &
p2=$!
mk qwen35-27b Q4_K_M q27b.gguf 6 "--keep-output-bf16 --layers $L27" &
p3=$!

if [ "${TESTS:-1}" = 1 ]; then
  OUT=$OUT timeout 300 sh scripts/gpu/run_tests.sh >"$OUT/tests.txt" 2>&1
  echo "== tests rc=$?"
  grep -E "^== |FAIL|graphs:" "$OUT/tests.txt" | grep -v '^== test.*rc=0$' | head -40
fi

# serve MODEL TAG: one stream through gRPC, slow steps and counters
stutter() {
  local m=$1 tag=$2 so=$OUT/serve.$2.out se=$OUT/serve.$2.err
  GANTRY_LOG_SLOW_STEP_MS=${SLOW_MS:-12} "$D/gantry-engine" serve --model "$m" --device cuda --listen 127.0.0.1:0 \
    --metrics-host 127.0.0.1 --metrics-port 0 --max-num-seqs 4 --max-model-len 4096 >"$so" 2>"$se" &
  local pid=$! gp= mp=
  for _ in $(seq 1 600); do
    line=$(grep -m1 '^ready ' "$so" 2>/dev/null)
    if [ -n "$line" ]; then
      gp=$(echo "$line" | sed -n 's/.*grpc_port=\([0-9]*\).*/\1/p')
      mp=$(echo "$line" | sed -n 's/.*metrics_port=\([0-9]*\).*/\1/p')
      break
    fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  echo "== stutter $tag"
  if [ -z "$gp" ]; then
    echo "serve did not start"; tail -5 "$se"; kill $pid 2>/dev/null; return
  fi
  grep -E "graphs: captured" "$se"
  timeout 120 "$D/engine-bench" --target "127.0.0.1:$gp" --tokens "$STUTTER_TOKENS" --conc 1
  exec 3<>"/dev/tcp/127.0.0.1/$mp" && printf 'GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n' >&3 && metrics=$(cat <&3)
  exec 3>&-
  echo "$metrics" | grep -E "^gantry_engine_(eager_steps_total|graph_captures_total|steps_total)"
  echo "slow steps logged: $(grep -c 'slow step' "$se")"
  grep 'slow step' "$se" | head -12
  kill -TERM $pid 2>/dev/null
  wait $pid
}
wait $p2
stutter "$MD/q9b.gguf" qwen35-9b
wait $p1
stutter "$MD/q8b.gguf" qwen3-8b

if [ "${BENCH:-1}" = 1 ]; then
  echo "== bench_decode qwen3-8b Q4_K_M --batch $BATCH (default products)"
  timeout 280 "$D/bench_decode" --model "$MD/q8b.gguf" --batch "$BATCH" --prompt 512 --gen 32 >"$OUT/b8.txt" 2>&1
  grep -E '^\| [0-9]|^\| batch|captured|warm-up' "$OUT/b8.txt"
  wait $p3
  echo "== bench_decode qwen35-27b Q4_K_M ($L27 layers) --batch 1,8 --prompt 512,2048"
  timeout 200 "$D/bench_decode" --model "$MD/q27b.gguf" --batch 1,8 --prompt 512,2048 --gen 16 >"$OUT/b27.txt" 2>&1
  grep -E '^\| [0-9]|^\| batch|^\| prompt' "$OUT/b27.txt"
  grep -E 'matmul|swiglu|multi' "$OUT/b27.txt" | grep -E 'x512|x2048' | head -12
fi
wait
