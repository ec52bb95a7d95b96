#!/usr/bin/env bash
# scripts/serve_demo.sh [BUILD_DIR] [-- CMD ARGS...] — the serving stack end to end on one
# machine: starts redis-server (free port), `gantry-engine serve` on the CPU with the demo model
# ($GANTRY_DEMO_MODEL to use another), gantry-router, waits for /ready, streams one completion
# through the router with curl, prints the streamed text, and stops everything. With `-- CMD`,
# runs CMD instead of the demo request, with GANTRY_ROUTER_URL (= GANTRY_URL) and GANTRY_MODEL exported, and
# exits with its status (used by tests that need a live stack). Needs redis-server and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then BIN=$1; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
CMD=("$@")
MODEL_FILE=${GANTRY_DEMO_MODEL:-tests/golden/demo/gantry-demo-code-22m.Q4_K_M.gguf}
PROMPT=${GANTRY_DEMO_PROMPT:-'def fibonacci(n):\n'}
TMP=$(mktemp -d)
# the logs exist before their writers start: a background job opens its redirections in the
# child, so the polling below (set -e, pipefail) could otherwise read a file not yet created
: >"$TMP/redis.log"; : >"$TMP/engine.log"; : >"$TMP/router.out"; : >"$TMP/router.log"
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap stop_all EXIT
die() { echo "serve_demo: $*" >&2; for f in "$TMP"/*.log; do echo "--- $f" >&2; tail -15 "$f" >&2; done; exit 1; }
free_port() { # a port nothing listens on (best effort)
  local p
  while :; do p=$((20000 + RANDOM % 40000)); (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }; done
}
"$BIN/gantry-engine" serve --help >/dev/null 2>&1 || die "no gantry-engine in $BIN (build it first)"
SERVE=("$BIN/gantry-engine" serve)
[ -x "$BIN/gantry-router" ] || die "no $BIN/gantry-router (build it first)"

# redis cannot listen on port 0: a free port, again if another process took it first
for _ in 1 2 3 4 5; do
  RPORT=$(free_port)
  redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
  rpid=$!
  for _ in $(seq 50); do grep -q "Ready to accept" "$TMP/redis.log" && break; kill -0 "$rpid" 2>/dev/null || break; sleep 0.1; done
  grep -q "Ready to accept" "$TMP/redis.log" && break
  kill "$rpid" 2>/dev/null || true
  wait "$rpid" 2>/dev/null || true
done
PIDS+=("$rpid")
# engine and router listen on port 0 and say which port they got (no race with parallel tests)
"${SERVE[@]}" --model "$MODEL_FILE" --served-model-name demo --listen "127.0.0.1:0" --metrics-port 0 >"$TMP/engine.log" 2>&1 &
epid=$!
PIDS+=("$epid")
EPORT=
for _ in $(seq 600); do
  EPORT=$(sed -n 's/^ready grpc_port=\([0-9]*\).*/\1/p' "$TMP/engine.log" | head -1)
  [ -n "$EPORT" ] && break
  kill -0 "$epid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$EPORT" ] || die "engine did not start"
"$BIN/gantry-router" --http "127.0.0.1:0" --redis "redis://127.0.0.1:$RPORT" \
  --engine "demo=127.0.0.1:$EPORT" --auth none >"$TMP/router.out" 2>"$TMP/router.log" &
hpid=$!
PIDS+=("$hpid")
HPORT=
for _ in $(seq 300); do
  HPORT=$(sed -n 's/.*gantry-router listening .* http_port=\([0-9]*\).*/\1/p' "$TMP/router.log" | head -1)
  [ -n "$HPORT" ] && break
  kill -0 "$hpid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$HPORT" ] || die "router did not start"
echo "== redis :$RPORT, engine :$EPORT ($MODEL_FILE), router http://127.0.0.1:$HPORT"
for i in $(seq 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/ready" || true)" = 200 ] && break
  sleep 0.2
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$HPORT/ready" || true)" = 200 ] || die "router not ready"
if [ ${#CMD[@]} -gt 0 ]; then
  export GANTRY_ROUTER_URL="http://127.0.0.1:$HPORT" GANTRY_URL="http://127.0.0.1:$HPORT" GANTRY_MODEL=demo
  status=0
  "${CMD[@]}" || status=$?
  exit $status
fi
echo "== POST /v1/completions (stream) through the router"
printf '%b' "$PROMPT"
BODY=$(printf '{"model":"demo","prompt":"%s","max_tokens":120,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' "$PROMPT")
# print each chunk's text as it arrives (JSON escapes \n \t \" \\ decoded by printf %b)
curl -sN -H 'Content-Type: application/json' -d "$BODY" "http://127.0.0.1:$HPORT/v1/completions" |
while IFS= read -r line; do
  case "$line" in
    'data: [DONE]') echo; break ;;
    data:*'"usage":{'*'"choices":[]'* | data:*'"choices":[]'*'"usage"'*)
      echo; echo "== usage: $(printf '%s' "$line" | sed -E 's/.*"usage":(\{.*\})\}$/\1/')" ;;
    data:*'"error"'*) echo; die "stream error: $line" ;;
    data:*'"text":"'*)
      t=$(printf '%s' "$line" | sed -E 's/.*"text":"(([^"\\]|\\.)*)".*/\1/')
      t=${t//\\\"/\"}; t=${t//\\\//\/}
      printf '%b' "$t" ;;
  esac
done
echo "== done"
