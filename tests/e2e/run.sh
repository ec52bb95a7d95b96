#!/usr/bin/env bash
# tests/e2e/run.sh ENGINE_KIND [node test files...] — starts redis-server (free port), an engine
# (ENGINE_KIND=real: `gantry-engine serve` on the CPU with tests/golden/qwen3-tiny.bf16.gguf;
# fake: the scripted gantry-fake-engine) and gantry-router, then runs the node tests against
# them (the official `openai` package, the AI SDK, LangChain and @grpc/grpc-js). $GANTRY_ENGINE_SERVE overrides the
# engine program (e.g. a Release engine with an ASan router). $GANTRY_ENGINE_TP=N serves with
# `--tp N` (CPU ranks) and exports GANTRY_TP_EXPECT, the greedy text of tp.test.mjs's prompt from
# `gantry-engine generate` with one rank, for tp.test.mjs to compare. Exit 77 = skipped (no node, no
# node_modules and no network, no `serve` command), which ctest reports as "Skipped".
# $GANTRY_ENGINE_TASK=embed serves an embedding copy of the model (gantry-gguf-set: qwen3.pooling_type
# = 3, add_eos_token) with `--task embed` (embeddings.test.mjs), and exports GANTRY_EMBED_GGUF.
set -u
KIND=${1:-fake}; shift || true
SRC=${GANTRY_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${GANTRY_BIN:-$SRC/build}
E2E=$SRC/tests/e2e
skip() { echo "SKIP: $*"; exit 77; }

command -v node >/dev/null || skip "node not installed"
command -v redis-server >/dev/null || skip "redis-server not installed"
# one install at a time (ctest runs the e2e tests in parallel; both use this node_modules): the
# marker is written only after a complete install, and a newer package-lock.json (a new
# dependency) installs again
exec 9>"$E2E/.npm-install.lock"
flock 9
if [ ! -f "$E2E/node_modules/.gantry-complete" ] || [ "$E2E/package-lock.json" -nt "$E2E/node_modules/.gantry-complete" ]; then
  command -v npm >/dev/null || skip "npm not installed"
  (cd "$E2E" && { [ -f package-lock.json ] && timeout 240 npm ci --no-audit --no-fund >/dev/null 2>&1 ||
                  timeout 240 npm install --no-audit --no-fund >/dev/null 2>&1; }) || skip "npm install failed (offline?)"
  touch "$E2E/node_modules/.gantry-complete"
fi
flock -u 9
[ -x "$BIN/gantry-router" ] || { echo "missing $BIN/gantry-router"; exit 1; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# waits until FILE contains a line matching REGEX (bounded); prints the match
wait_line() {
  local file=$1 re=$2 n=0
  while [ $n -lt 600 ]; do
    if grep -Eo "$re" "$file" 2>/dev/null | head -1 | grep -q .; then grep -Eo "$re" "$file" | head -1; return 0; fi
    sleep 0.1; n=$((n + 1))
  done
  return 1
}

# redis on a free port (retry on collision). Ready is this server's own "Ready to accept" line:
# a PING on the port could be answered by another test's redis that holds it (ours then exits)
for i in 1 2 3 4 5; do
  RPORT=$((20000 + RANDOM % 40000))
  redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
  RPID=$!
  for j in $(seq 100); do grep -q "Ready to accept" "$TMP/redis.log" && break; kill -0 "$RPID" 2>/dev/null || break; sleep 0.1; done
  if grep -q "Ready to accept" "$TMP/redis.log" && kill -0 "$RPID" 2>/dev/null; then PIDS+=("$RPID"); break; fi
  kill "$RPID" 2>/dev/null; wait "$RPID" 2>/dev/null; RPORT=
done
[ -n "$RPORT" ] || { echo "cannot start redis-server"; exit 1; }

MODEL=tiny
if [ "$KIND" = real ]; then
  if [ -n "${GANTRY_ENGINE_SERVE:-}" ]; then SERVE=("$GANTRY_ENGINE_SERVE")
  else SERVE=("$BIN/gantry-engine" serve); fi
  GGUF=${GANTRY_E2E_MODEL:-$SRC/tests/golden/qwen3-tiny.bf16.gguf}
  if [ "${GANTRY_ENGINE_TASK:-}" = embed ]; then
    "$BIN/gantry-gguf-set" "$GGUF" "$TMP/embed.gguf" qwen3.pooling_type=u32:3 tokenizer.ggml.add_eos_token=bool:1 ||
      { echo "gantry-gguf-set failed"; exit 1; }
    GGUF=$TMP/embed.gguf
    SERVE+=(--task embed)
    export GANTRY_EMBED_GGUF=$GGUF
  fi
  if [ -n "${GANTRY_ENGINE_TP:-}" ]; then
    SERVE+=(--tp "$GANTRY_ENGINE_TP")
    GANTRY_TP_EXPECT=$("$BIN/gantry-engine" generate --model "$GGUF" --prompt "The quick brown fox" --max-tokens 8 \
      --temperature 0 --ignore-eos --threads 1) || { echo "generate (one rank) failed"; exit 1; }
    export GANTRY_TP_EXPECT
  fi
  # port 0 for gRPC and metrics: the engine says which ports it got once it is serving (no
  # collision with parallel tests, and no guess at how long the model takes to load)
  "${SERVE[@]}" --model "$GGUF" --listen "127.0.0.1:0" --metrics-port 0 >"$TMP/engine.log" 2>&1 &
  EPID=$!
  PIDS+=("$EPID")
  EPORT=
  for i in $(seq 600); do
    EPORT=$(sed -n 's/^ready grpc_port=\([0-9]*\).*/\1/p' "$TMP/engine.log" | head -1)
    [ -n "$EPORT" ] && break
    kill -0 "$EPID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$EPORT" ] || { echo "engine did not start:"; cat "$TMP/engine.log"; exit 1; }
  MPORT=$(sed -n 's/^ready grpc_port=[0-9]* metrics_port=\([0-9]*\).*/\1/p' "$TMP/engine.log" | head -1)
else
  [ -x "$BIN/gantry-fake-engine" ] || { echo "missing $BIN/gantry-fake-engine"; exit 1; }
  "$BIN/gantry-fake-engine" B >"$TMP/engine.log" 2>&1 &
  PIDS+=("$!")
  EPORT=$(wait_line "$TMP/engine.log" 'port [0-9]+' | awk '{print $2}') || { echo "fake engine did not start"; exit 1; }
fi

"$BIN/gantry-router" --http 127.0.0.1:0 --grpc 127.0.0.1:0 --redis "redis://127.0.0.1:$RPORT" \
  --engine "$MODEL=127.0.0.1:$EPORT" --health-ms 200 --admission-hold-ms 1 --auth none >"$TMP/router.out" 2>"$TMP/router.log" &
PIDS+=("$!")
LINE=$(wait_line "$TMP/router.out" 'listening http_port=[0-9]+ grpc_port=[0-9]+') || { echo "router did not start:"; cat "$TMP/router.log"; exit 1; }
HPORT=$(echo "$LINE" | sed -E 's/.*http_port=([0-9]+).*/\1/')
GPORT=$(echo "$LINE" | sed -E 's/.*grpc_port=([0-9]+).*/\1/')
for i in $(seq 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/ready")" = 200 ] && break
  sleep 0.1
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/ready")" = 200 ] || {
  echo "router not ready"; tail -20 "$TMP/router.log"; tail -20 "$TMP/engine.log"; exit 1; }

# the real engine's own gRPC port, Prometheus endpoint and log (embed_cancel.test.mjs)
[ "$KIND" = real ] && export GANTRY_ENGINE_GRPC="127.0.0.1:$EPORT" GANTRY_ENGINE_METRICS="http://127.0.0.1:$MPORT/metrics" \
  GANTRY_ENGINE_LOG="$TMP/engine.log"
export GANTRY_URL="http://127.0.0.1:$HPORT" GANTRY_GRPC="127.0.0.1:$GPORT" GANTRY_MODEL=$MODEL \
       GANTRY_ENGINE_KIND=$KIND GANTRY_PROTOS="$SRC/protos"
FILES=("$@")
[ ${#FILES[@]} -gt 0 ] || FILES=("$E2E"/*.test.mjs)
# GANTRY_E2E_TEST_ARGS: extra node --test options (e.g. --test-name-pattern=structured)
cd "$E2E" && node --test ${GANTRY_E2E_TEST_ARGS:-} "${FILES[@]}"
RC=$?
if [ $RC -ne 0 ]; then echo "--- router log"; tail -40 "$TMP/router.log"; echo "--- engine log"; tail -20 "$TMP/engine.log"; fi
exit $RC
