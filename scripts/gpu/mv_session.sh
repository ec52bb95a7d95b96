#!/bin/sh
# One device call for the batch-1 product kernels (issue 12, kernels/matvec_mma2.cu), run from
# the repository root on the GPU machine: PACK=<dist.tar.xz of scripts/gpu/pack.sh with TARGETS
# "test_cuda_ops bench_matvec bench_decode gantry-mkmodel"> sh mv_session.sh.
# Steps (each under a timeout, a failing step does not stop the others, steps past BUDGET seconds
# are skipped; every step's output goes to $OUT/all.txt, the key lines to stdout):
#   gantry-mkmodel qwen3-8b Q4_K_M in the background;
#   test_cuda_ops with GANTRY_MATVEC_MMA=2 GANTRY_ATTN_SPLIT_LEN=16 (every op test on the v2 kernel
#   and 16-position attention ranges; test_matvec_mma2: v2 vs the CPU and v2 == v1 bit for bit);
#   bench_matvec Q4_K / Q6_K at 1 and 2 rows: paths old (CUDA cores), mma (v1), mma2 (v2);
#   bench_decode qwen3-8b Q4_K_M --batch 1,8 --prompt 512 --gen 64 with v1, then with v2, then
#   (--batch 1) v2 with decode attention ranges of 16 positions (GANTRY_ATTN_SPLIT_LEN=16).
set -u
OUT=${OUT:-/tmp/mv-out}
PACK=${PACK:-build-cuda-pack/dist.tar.xz}
BUDGET=${BUDGET:-270}
. "$(dirname "$0")/session_lib.sh"
session_begin "$PACK"
M=/tmp/qwen3-8b.Q4_K_M.gguf
session_mkmodel "$M" /tmp/mk.txt --preset qwen3-8b --type Q4_K_M --threads 10
step bench_matvec 70 "$D/bench_matvec" --types Q4_K,Q6_K --ns 1,2 --mmq 0 --reps 30 &&
  grep -E "^copy|\| (old|mma|mma2) +\||FAIL|checks passed|VALIDATION" /tmp/step.txt
step test_cuda_ops_v2 70 env GANTRY_MATVEC_MMA=2 GANTRY_ATTN_SPLIT_LEN=16 "$D/test_cuda_ops" &&
  grep -E "mma2|vs v1|FAIL|\[  (PASSED|FAILED)|\[ +(FAILED) +\]" /tmp/step.txt | head -80
if session_wait "$M"; then
  for v in "1 64 1,8" "2 64 1,8" "2 16 1"; do
    set -- $v
    step "decode_mma$1_split$2" 45 env GANTRY_MATVEC_MMA=$1 GANTRY_ATTN_SPLIT_LEN=$2 "$D/bench_decode" --model "$M" \
      --batch "$3" --prompt 512 --gen 64 && grep -E "^\||^batch|^sum of ops|warm-up|rror" /tmp/step.txt | head -70
  done
else
  echo "== qwen3-8b Q4_K_M not made: $(tail -2 /tmp/mk.txt)"
fi
echo "== done in $(($(date +%s) - t0)) s"
