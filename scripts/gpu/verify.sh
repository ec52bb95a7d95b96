#!/bin/bash
# On the GPU machine, from the repository root, with build-cuda-pack carried: the end-of-session
# check in one call (~3 minutes):
#   1. gantry-mkmodel qwen35-9b Q4_K_M --mtp (BF16 head) into $MODELDIR in the background;
#   2. every packed GPU test (scripts/gpu/run_tests.sh) meanwhile;
#   3. bench_verify on that model: a plain decode step vs a verify step of 1 + $K tokens at batch 1
#      and 8, and the MTP drafter's step (issue 25's cost targets), when bench_verify was packed.
# The model stays in $MODELDIR for a following scripts/gpu/stack.sh call (carry build-cuda-stack):
#   DIST= bash scripts/gpu/stack.sh /tmp/qwen35-9b.Q4_K_M.mtp.gguf
# Logs in $OUT; stdout carries the summary.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
cd "$SRC" || exit 1
. scripts/gpu/session_lib.sh
OUT=${OUT:-/tmp/verify}
BUDGET=${BUDGET:-400} K=${K:-3} MODELDIR=${MODELDIR:-/tmp}
session_begin build-cuda-pack/dist.tar.xz
M=$MODELDIR/qwen35-9b.Q4_K_M.mtp.gguf
[ -s "$M" ] || MK_TIMEOUT=300 session_mkmodel "$M" "$OUT/mk.txt" --preset qwen35-9b --type Q4_K_M --mtp --threads 12 --keep-output-bf16
mkdir -p /tmp/tlogs
step tests 240 env OUT=/tmp/tlogs sh scripts/gpu/run_tests.sh
grep -E "^== |FAIL|rc=" /tmp/step.txt | grep -v 'rc=0$' | grep -vE '^== test_[a-z0-9_]+$' | head -40
grep -E "^== test_[a-z0-9_]+ rc=" /tmp/step.txt | tr '\n' ' '; echo
tar -C /tmp/tlogs -czf "$OUT/test-logs.tgz" . 2>/dev/null
if [ -x "$D/bench_verify" ] && session_wait "$M"; then
  step "bench_verify" 120 "$D/bench_verify" --model "$M" --device cuda --batches 1,8 --k "$K" --ctx 512 --iters 30 --warm 5
  grep -v ' INFO ' /tmp/step.txt | tail -20
fi
