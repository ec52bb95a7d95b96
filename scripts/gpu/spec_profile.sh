#!/bin/sh
# scripts/gpu/spec_profile.sh — where a speculative step's time goes, end to end through the
# scheduler, in one device call (~3 min; carry build-cuda-pack, `slim.sh hide stack` keeps demo35):
#  1. bench_verify on demo35 (model-level: decode vs verify 1 + 3 vs the MTP drafter, batch 1 and 8);
#  2. bench_spec on demo35 (off vs mtp / ngram, k 3, greedy, batch 1 and 8) and on qwen35-9b Q4_K_M
#     --mtp (forced acceptance 2.5), each with GANTRY_LOG_SLOW_STEP_MS so that every step logs its
#     phases (plan / forward / emit, emit holding the MTP pass; captures); the table sums them per
#     run: steps, ms per step, forward and emit ms per step, steps by token count, captures.
# Env: OUT (/tmp/gpu-specprof), BUDGET (420 s), MODELDIR (/tmp).
set -u
OUT=${OUT:-/tmp/gpu-specprof}
BUDGET=${BUDGET:-420}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
MD=${MODELDIR:-/tmp}
M9=$MD/qwen35-9b.Q4_K_M.mtp.gguf
DEMO=tests/golden/demo35/gantry-demo35-code-22m.Q4_K_M.gguf
[ -s "$M9" ] || session_mkmodel "$M9" "$OUT/mk9.txt" --preset qwen35-9b --type Q4_K_M --mtp --keep-output-bf16 --threads 8

export GANTRY_LOG_SLOW_STEP_MS=0.0001
step verify_demo 60 "$D/bench_verify" --model "$DEMO" --device cuda --batches 1,8 --k 3 --ctx 512 --iters 30 --warm 5
grep -v ' INFO ' /tmp/step.txt | tail -6
for b in 1 8; do
  for mode in mtp ngram; do
    step "spec_demo_${mode}_b$b" 60 "$D/bench_spec" --model "$DEMO" --device cuda --mode $mode --k 3 --batch $b --gen 128
    grep -E '^\| (off|mtp|ngram)|speed-up' /tmp/step.txt
    phases "demo $mode b$b"
  done
done
if session_wait "$M9"; then
  step spec9 120 "$D/bench_spec" --model "$M9" --device cuda --mode mtp --force-accept 2.5 --k 3 --batch 1 --gen 128
  grep -E '^\| (off|mtp|ngram)|speed-up' /tmp/step.txt
  phases "9b mtp accept 2.5 b1"
  step spec9_off 120 "$D/bench_spec" --model "$M9" --device cuda --mode ngram --k 3 --batch 1 --gen 128
  grep -E '^\| (off|mtp|ngram)|speed-up' /tmp/step.txt
  phases "9b ngram b1"
fi
echo "== done in $(($(date +%s) - t0)) s"
