#!/bin/bash
# On the GPU machine, from the repository root, with build-cuda-pack carried: the programmatic
# dependent launch (kc_launch, kernels/common.cuh) device call.
#   1. gantry-mkmodel qwen3-8b Q4_K_M and qwen35-9b Q4_K_M (BF16 head) in the background;
#   2. the GPU tests (scripts/gpu/run_tests.sh, PDL on: the default) while they are made;
#   3. bench_decode per model at --batch $BATCH --prompt 512 for each GANTRY_PDL mode in $MODES
#      (0 off, 1 every launch, 2 after small grids: kernels/common.cuh).
# Logs in $OUT; stdout carries the summary.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
. scripts/gpu/session_lib.sh
OUT=${OUT:-/tmp/pdl}
BUDGET=${BUDGET:-540} BATCH=${BATCH:-1,8,32} GEN=${GEN:-64}
session_begin build-cuda-pack/dist.tar.xz
MD=${MODELDIR:-/tmp}
[ -s "$MD/q8b.gguf" ] || session_mkmodel "$MD/q8b.gguf" "$OUT/mk.q8b.txt" --preset qwen3-8b --type Q4_K_M --threads 6
[ -s "$MD/q9b.gguf" ] || session_mkmodel "$MD/q9b.gguf" "$OUT/mk.q9b.txt" --preset qwen35-9b --type Q4_K_M --threads 6 --keep-output-bf16
if [ "${TESTS:-1}" = 1 ]; then
  mkdir -p /tmp/tlogs; step tests 300 env OUT=/tmp/tlogs sh scripts/gpu/run_tests.sh
  grep -E "^== |FAIL|rc=" /tmp/step.txt | grep -v 'rc=0$' | grep -vE '^== test_[a-z0-9_]+$' | head -40
fi
for m in q8b q9b; do
  session_wait "$MD/$m.gguf" || { echo "== $m not made"; tail -3 "$OUT/mk.$m.txt"; continue; }
  for pdl in ${MODES:-0 1 2}; do # GANTRY_PDL
    step "bench $m pdl=$pdl" 150 env GANTRY_PDL=$pdl "$D/bench_decode" --model "$MD/$m.gguf" --batch "$BATCH" \
      --prompt 512 --gen "$GEN"
    cp /tmp/step.txt "$OUT/bench.$m.$pdl.txt"
    grep -E '^\| [0-9]+ \|' /tmp/step.txt | sed "s/^/$m pdl=$pdl /" | head -8
    grep -E 'sum of ops' /tmp/step.txt | head -3
  done
done
