#!/bin/bash
# On the GPU machine, from the repository root, after scripts/gpu/pack.sh with STACK=1 (which packs
# gantry-router, gantry and redis-server into build-cuda-stack/stack.tar.xz, unpacked here over
# build-cuda-dist when DIST is unset): the whole serving path on the GPU.
#   redis-server + gantry-engine serve --device cuda + gantry-router, then `gantry bench` through
#   the router: contexts $CONTEXTS (512,2048), concurrency $CONC (1,8,32), cold and warm; prints
#   the bench table (TTFT p50/p90, median inter-token interval as per-user tok/s, cached tokens)
#   and the engine's startup lines (KV pool, graphs) and step metrics.
# Usage: scripts/gpu/stack.sh MODEL.gguf [NAME]   (NAME: the served model name, default "model")
# Env: DIST (programs, default build-cuda-dist), OUT (logs, default /tmp/gpu-stack), SEQS (32),
# DEVICE (cuda; cpu runs the same stack on a local build), MAX_LEN (4096), MAX_TOKENS (128), CONTEXTS, CONC, ENGINE_ARGS (extra `serve` options),
# BENCH_ARGS (extra `gantry bench` options), SPEC_METRICS (1: the bench reads speculative decoding's
# counters from the engine's /metrics: acc_len), BENCH_TIMEOUT (420 s), SSE_SAMPLE (0: tokens of one more
# streamed request whose event sizes are printed).
# Exit 1 when a part failed to start or the bench failed.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
M=${1:?usage: stack.sh MODEL.gguf [NAME]}
NAME=${2:-model}
D=${DIST:-$SRC/build-cuda-dist}
[ -z "${DIST:-}" ] && [ -f build-cuda-stack/stack.tar.xz ] && [ ! -x "$D/gantry-router" ] && tar xJf build-cuda-stack/stack.tar.xz
OUT=${OUT:-/tmp/gpu-stack}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
REDIS=$D/redis-server
[ -x "$REDIS" ] || REDIS=$(command -v redis-server || true)
for p in "$D/gantry-engine" "$D/gantry-router" "$D/gantry" "$REDIS"; do
  [ -n "$p" ] && [ -x "$p" ] || { echo "== stack: missing program ${p:-redis-server} (pack with STACK=1)"; exit 1; }
done
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap stop_all EXIT
free_port() {
  local p
  while :; do p=$((20000 + RANDOM % 40000)); (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }; done
}
# the machine's own curl, never with the packed libraries (its libcurl may be older than ours)
sys_curl() { env -u LD_LIBRARY_PATH curl "$@"; }
http_code() { # GET url -> status code (curl when present, else bash /dev/tcp)
  if command -v curl >/dev/null; then sys_curl -s -o /dev/null -w '%{http_code}' "$1"; return; fi
  local hp=${1#http://} path
  path=/${hp#*/} hp=${hp%%/*}
  exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}" 2>/dev/null || { echo 000; return; }
  printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$path" >&3
  head -1 <&3 | awk '{print $2}'
  exec 3>&-
}

RPORT=$(free_port)
"$REDIS" --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT" >"$OUT/redis.log" 2>&1 &
pids+=($!)
EPORT=$(free_port) MPORT=$(free_port)
# shellcheck disable=SC2086
"$D/gantry-engine" serve --model "$M" --device "${DEVICE:-cuda}" --listen "127.0.0.1:$EPORT" --metrics-host 127.0.0.1 \
  --metrics-port "$MPORT" --max-num-seqs "${SEQS:-32}" --max-model-len "${MAX_LEN:-4096}" ${ENGINE_ARGS:-} \
  >"$OUT/engine.out" 2>"$OUT/engine.log" &
epid=$!
pids+=($epid)
for _ in $(seq 1 600); do
  grep -q '^ready ' "$OUT/engine.out" 2>/dev/null && break
  kill -0 $epid 2>/dev/null || break
  sleep 0.5
done
if ! grep -q '^ready ' "$OUT/engine.out" 2>/dev/null; then
  echo "== stack: engine did not start"
  tail -20 "$OUT/engine.log"
  exit 1
fi
grep -E "kv|KV|pool|graphs|warm-up|memory" "$OUT/engine.log" | head -12
HPORT=$(free_port)
"$D/gantry-router" --http "127.0.0.1:$HPORT" --redis "redis://127.0.0.1:$RPORT" --engine "$NAME=127.0.0.1:$EPORT" \
  --auth none >"$OUT/router.out" 2>"$OUT/router.log" &
pids+=($!)
for _ in $(seq 1 300); do
  [ "$(http_code "http://127.0.0.1:$HPORT/ready")" = 200 ] && break
  sleep 0.2
done
if [ "$(http_code "http://127.0.0.1:$HPORT/ready")" != 200 ]; then
  echo "== stack: router not ready"
  tail -20 "$OUT/router.log"
  exit 1
fi
echo "== stack: redis :$RPORT, engine :$EPORT ($M), router :$HPORT; gantry bench"
rc=0
SM= CTXA="--contexts ${CONTEXTS:-512,2048}"
case " ${BENCH_ARGS:-} " in *" --dataset "*) CTXA= ;; esac # a dataset replays its own prompts
[ "${SPEC_METRICS:-0}" = 1 ] && SM="--spec-metrics http://127.0.0.1:$MPORT"
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-420}" "$D/gantry" --url "http://127.0.0.1:$HPORT" bench --model "$NAME" \
  $CTXA --concurrency "${CONC:-1,8,32}" --max-tokens "${MAX_TOKENS:-128}" \
  --tokenizer "$M" --out "$OUT/bench" $SM ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.txt"
r=${PIPESTATUS[0]}
echo "== stack bench rc=$r (logs $OUT)"
[ "$r" = 0 ] || rc=1
# SSE_SAMPLE=N: one more streamed chat request of N tokens, its raw SSE kept in $OUT/sse_sample.txt,
# and the sizes of its events (issue 24: without TCP_NODELAY, the client's 40 ms delayed ACK
# followed writes of one size, 524 bytes or more)
if [ "${SSE_SAMPLE:-0}" -gt 0 ] && command -v curl >/dev/null; then
  sys_curl -sN "http://127.0.0.1:$HPORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$NAME\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}],\"max_tokens\":$SSE_SAMPLE,\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}}" \
    >"$OUT/sse_sample.txt"
  awk '/^data: /{n++; l=length($0)+2; s+=l; if(l>=524)big++; if(l==p)eq++; p=l}
       END{if(n) printf "== sse sample: %d events, mean %.0f bytes, %d of 524+ bytes, %d the size of the one before\n", n, s/n, big, eq}' \
    "$OUT/sse_sample.txt"
  sed -n '3p' "$OUT/sse_sample.txt" | cut -c1-400
fi
echo "== engine metrics"
if command -v curl >/dev/null; then
  sys_curl -s "http://127.0.0.1:$MPORT/metrics" | grep -E "^gantry_engine_(eager_steps_total|steps_total|generation_tokens_total|prompt_tokens_total|prefix_cache)" | head -12
fi
exit $rc
