#!/bin/bash
# On the GPU machine, from the repository root, after scripts/gpu/pack.sh with STACK=1: issue 24's
# c1 stutter check through the whole stack. For each model of MODELS, scripts/gpu/suite.sh STACK=1
# (gantry-mkmodel into $MODELDIR when missing; redis + serve --device cuda + gantry-router +
# `gantry bench --concurrency 1`, cold and warm, per context of CONTEXTS, MAX_TOKENS tokens each),
# then one table: median and p99 inter-token interval at c1 (itl_p50 / itl_p99), tpot_p50, and
# itl_p99 / tpot_p50 against the target (<= 1.5). Before TCP_NODELAY on the router's accepted
# connections the Qwen3.5 rows showed itl_p99 40-42 ms against tpot_p50 4.6 ms.
# Usage: scripts/gpu/stutter.sh
# Env: MODELS ("qwen3-8b:Q4_K_M qwen35-9b:Q4_K_M"), CONTEXTS (512,2048), MAX_TOKENS (512),
# OUT (/tmp/gpu-stutter), MODELDIR (/tmp), SSE_SAMPLE (256: tokens of one raw SSE sample per model,
# whose event sizes stack.sh prints). Exit 1 when a part failed or a row misses the target.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
MODELS=${MODELS:-"qwen3-8b:Q4_K_M qwen35-9b:Q4_K_M"}
OUT=${OUT:-/tmp/gpu-stutter}
mkdir -p "$OUT"
STACK=1 TESTS=0 BENCH=0 MICRO=0 STACK_MODELS="$MODELS" CONC=1 CONTEXTS="${CONTEXTS:-512,2048}" \
  MAX_TOKENS="${MAX_TOKENS:-512}" SSE_SAMPLE="${SSE_SAMPLE:-256}" OUT="$OUT" bash scripts/gpu/suite.sh \
  >"$OUT/suite.txt" 2>&1
rc=$?
grep -E "^== (stack|mkmodel|sse sample)" "$OUT/suite.txt"
echo "== c1 inter-token interval through the router ($(cat "${DIST:-build-cuda-dist}/COMMIT" 2>/dev/null || echo "commit unknown"))"
printf "%-20s %6s %5s %9s %9s %9s %8s %s\n" model ctx mode itl_p50 itl_p99 tpot_p50 p99/tpot target
for spec in $MODELS; do
  csv=$OUT/stack.${spec%%:*}.${spec#*:}/bench/results.csv
  if [ ! -s "$csv" ]; then
    printf "%-20s no results (%s)\n" "$spec" "$csv"
    rc=1
    continue
  fi
  # columns by name: the CSV header of gantry bench (clients/bench_out.c)
  awk -F, -v m="$spec" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["concurrency"] == 1 {
      r = $c["tpot_p50_ms"] > 0 ? $c["itl_p99_ms"] / $c["tpot_p50_ms"] : 0
      ok = r > 0 && r <= 1.5
      if (!ok) bad = 1
      printf "%-20s %6s %5s %9.3f %9.3f %9.3f %8.2f %s\n", m, $c["context"], $c["mode"], $c["itl_p50_ms"],
             $c["itl_p99_ms"], $c["tpot_p50_ms"], r, ok ? "ok" : "MISSED"
    }
    END { exit bad }' "$csv" || rc=1
done
echo "== stutter rc=$rc (logs $OUT: suite.txt, stack.*/bench.txt, stack.*/sse_sample.txt)"
exit $rc
