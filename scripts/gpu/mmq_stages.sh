#!/bin/sh
# scripts/gpu/mmq_stages.sh — one device call for the decode mmq kernel's staged weight loads
# (kernels/mmq.cu, GANTRY_MMQ_STAGES), from the repository root after scripts/gpu/pack.sh with
# test_cuda_ops, bench_matvec, bench_decode, bench_verify, gantry-mkmodel (carry build-cuda-pack;
# slim.sh hide tests here):
#  0. gantry-mkmodel qwen3-8b / qwen35-9b --mtp Q4_K_M in the background;
#  1. test_cuda_ops (test_mmq_staged: stages 2 / 3 equal the unstaged products bit for bit);
#  2. bench_matvec, Q4_K and Q5_K, the qwen3-8b shapes at 8..64 rows: stages 0 / 2 / 3 (path
#     mmqP/OsS; P parts of x, O blocks per SM), bitwise-checked against stages 0;
#  3. bench_decode --batch 1,8,32 per model and bench_verify --batches 1,8 (qwen35-9b) with
#     GANTRY_MMQ_STAGES 0 and unset (by shape).
# Env: OUT (/tmp/mmq-stages), BUDGET (540 s), MODELDIR (/tmp).
set -u
OUT=${OUT:-/tmp/mmq-stages}
BUDGET=${BUDGET:-540}
. "$(dirname "$0")/session_lib.sh"
session_begin build-cuda-pack/dist.tar.xz
MD=${MODELDIR:-/tmp}
M9=$MD/qwen35-9b.Q4_K_M.mtp.gguf M8=$MD/qwen3-8b.Q4_K_M.gguf
[ -s "$M8" ] || session_mkmodel "$M8" "$OUT/mk8.txt" --preset qwen3-8b --type Q4_K_M --threads 7
[ -s "$M9" ] || session_mkmodel "$M9" "$OUT/mk9.txt" --preset qwen35-9b --type Q4_K_M --mtp --keep-output-bf16 --threads 7
step ops 150 "$D/test_cuda_ops"
grep -E "PASSED|FAILED|FAIL|mmq Q4_K 300x1024 rows (9|33) occ 1" /tmp/step.txt | head -12
cp /tmp/step.txt "$OUT/test_cuda_ops.txt"
step matvec 150 "$D/bench_matvec" --types Q4_K,Q5_K --ns 1 --mmq 1 --shapes 4096x4096,12288x4096,4096x12288 \
  --mmq-ns 8,16,32,64 --reps 20
cp /tmp/step.txt "$OUT/bench_matvec.txt"
grep -E "^copy|mmq1/|FAIL|VALIDATION|all checks" /tmp/step.txt | head -80
for m in "$M8" "$M9"; do
  session_wait "$m" || { echo "== $m not made"; continue; }
  for s in 0 auto; do
    if [ "$s" = auto ]; then set -- env -u GANTRY_MMQ_STAGES; else set -- env GANTRY_MMQ_STAGES=$s; fi
    step "decode $(basename "$m") stages=$s" 90 "$@" "$D/bench_decode" --model "$m" --batch 1,8,32 --prompt 512 --gen 32
    cp /tmp/step.txt "$OUT/decode.$(basename "$m" .gguf).$s.txt"
    grep -E '^\| [0-9]+ \||prefill' /tmp/step.txt | sed "s/^/stages=$s /" | head -6
    if [ "$m" = "$M9" ]; then
      step "verify stages=$s" 60 "$@" "$D/bench_verify" --model "$M9" --device cuda --batches 1,8 --k 3 --ctx 512 --iters 30 --warm 5
      grep -v ' INFO ' /tmp/step.txt | tail -5 | sed "s/^/stages=$s /"
    fi
  done
done
echo "== done in $(($(date +%s) - t0)) s"
