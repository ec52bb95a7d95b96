#!/bin/sh
# scripts/gpu/session_check.sh — the end-of-session GPU check in one call (~5-6 min), from the
# repository root on the GPU machine, carrying build-cuda-pack (scripts/gpu/pack.sh with every GPU
# test, bench_verify, bench_spec, bench_gemv, bench_decode, gantry-mkmodel; slim.sh hide tests here):
#  0. gantry-mkmodel qwen35-27b Q4_K_M --mtp (BF16 head) under setsid, so it outlives this call for
#     a following warm one (scripts/gpu/spec27.sh), and qwen35-9b --mtp / qwen3-8b in the background;
#  1. every packed GPU test (scripts/gpu/run_tests.sh);
#  2. bench_verify on qwen35-9b: decode vs verify 1 + 3 vs the MTP drafter at batch 1 and 8, with the
#     default draft vocabulary and with the whole one (--draft-vocab 0);
#  3. bench_gemv --wired 1 (the wired pipelined product vs the current path, per shape);
#  4. bench_decode qwen3-8b / qwen35-9b --batch 1,8 for GANTRY_GPIPE 0 and auto.
# Env: OUT (default /tmp/gpu-check), BUDGET (540 s), MODELDIR (/tmp), WIRED (1: step 3; 0 skips it),
# GPIPE_MODES (step 4's GANTRY_GPIPE settings, default "0 auto"), BATCHES (step 4's, "1,8"), MK27
# (1: step 0's 27B; 0 skips it).
set -u
OUT=${OUT:-/tmp/gpu-check}
BUDGET=${BUDGET:-540}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
MD=${MODELDIR:-/tmp}
M27=$MD/qwen35-27b.Q4_K_M.mtp.gguf M9=$MD/qwen35-9b.Q4_K_M.mtp.gguf M8=$MD/qwen3-8b.Q4_K_M.gguf
if [ "${MK27:-1}" = 1 ] && [ ! -s "$M27" ]; then
  rm -f "$M27.done"
  setsid sh -c "timeout 900 '$D/gantry-mkmodel' --preset qwen35-27b --type Q4_K_M --mtp --keep-output-bf16 --threads 6 \
    --out '$M27.tmp' >'$MD/mk27.txt' 2>&1 && mv '$M27.tmp' '$M27'; touch '$M27.done'" </dev/null >/dev/null 2>&1 &
fi
[ -s "$M9" ] || session_mkmodel "$M9" "$OUT/mk9.txt" --preset qwen35-9b --type Q4_K_M --mtp --keep-output-bf16 --threads 5
[ -s "$M8" ] || session_mkmodel "$M8" "$OUT/mk8.txt" --preset qwen3-8b --type Q4_K_M --threads 5
mkdir -p /tmp/tlogs
step tests 240 env OUT=/tmp/tlogs sh scripts/gpu/run_tests.sh
grep -E "^== |FAIL|rc=" /tmp/step.txt | grep -v 'rc=0$' | grep -vE '^== test_[a-z0-9_]+$' | head -30
grep -E "^== test_[a-z0-9_]+ rc=" /tmp/step.txt | tr '\n' ' '; echo
grep -hE "gpipe .*(rows|err)|graphs on:|graph steps" /tmp/tlogs/*.txt 2>/dev/null | head -12
tar -C /tmp/tlogs -czf "$OUT/test-logs.tgz" . 2>/dev/null
if session_wait "$M9"; then
  step verify 90 "$D/bench_verify" --model "$M9" --device cuda --batches 1,8 --k 3 --ctx 512 --iters 30 --warm 5
  grep -v ' INFO ' /tmp/step.txt | tail -8
  step verify_fullvocab 60 "$D/bench_verify" --model "$M9" --device cuda --batches 1 --k 3 --ctx 512 --iters 30 --warm 5 --draft-vocab 0
  grep -v ' INFO ' /tmp/step.txt | tail -4
fi
[ "${WIRED:-1}" = 0 ] || step wired 120 "$D/bench_gemv" --wired 1 --types Q4_K,Q6_K --rows 1,2,8 --reps 20
cp /tmp/step.txt "$OUT/wired.txt"
sed -n '/^wired/,$p' /tmp/step.txt | head -60
for m in "$M8" "$M9"; do
  session_wait "$m" || { echo "== $m not made"; continue; }
  for g in ${GPIPE_MODES:-0 auto}; do
    if [ "$g" = auto ]; then set -- env -u GANTRY_GPIPE; else set -- env GANTRY_GPIPE=$g; fi
    step "bench $(basename "$m") gpipe=$g" 90 "$@" "$D/bench_decode" --model "$m" --batch "${BATCHES:-1,8}" --prompt 512 --gen 32
    cp /tmp/step.txt "$OUT/bench.$(basename "$m" .gguf).$g.txt"
    grep -E '^\| [0-9]+ \||prefill' /tmp/step.txt | sed "s/^/gpipe=$g /" | head -6
  done
done
echo "== done in $(($(date +%s) - t0)) s; 27B: $(ls -la "$M27" 2>/dev/null | awk '{print $5}') $(tail -1 "$MD/mk27.txt" 2>/dev/null)"
