#!/bin/sh
# One device call for decode attention's pass-1 kernels (kc_attn_decode kernel 1 vs 2), run from
# the repository root on the GPU machine after scripts/gpu/pack.sh with
# TARGETS="test_cuda_ops bench_attn bench_decode gantry-mkmodel":
#   PACK=<dist.tar.xz> sh scripts/gpu/attn_decode.sh
# pack.sh's default build (sm_90 machine code only, since 4a5e01e) packs small enough to carry
# (all its default programs: 7.8 MB at accc449). Before it, these four programs needed a build with
# -DCMAKE_CUDA_FLAGS=--compress-mode=none (BUILD=<that dir>): 6.2 MB packed, 8.4 MB without.
# Steps (each under a timeout, a failing one does not stop the others, steps past BUDGET seconds
# are skipped; every output in $OUT/all.txt, key lines on stdout): gantry-mkmodel qwen3-8b Q4_K_M
# in the background; bench_attn --decode (kernel 1 vs 2, us / GB/s / % of copy bandwidth, their
# difference); test_cuda_ops (attention lines); bench_decode on the model at batch 1,8,32 x
# prompt 512 with GANTRY_ATTN_DECODE=1 and =2 (step time and the attention share).
set -u
OUT=${OUT:-/tmp/attn-decode-out}
PACK=${PACK:-build-cuda-pack/dist.tar.xz}
BUDGET=${BUDGET:-280}
. "$(dirname "$0")/session_lib.sh"
session_begin "$PACK"
Q3=/tmp/qwen3-8b.Q4_K_M.gguf
session_mkmodel "$Q3" /tmp/mk1.txt --preset qwen3-8b --type Q4_K_M --threads 10
step bench_attn 60 "$D/bench_attn" --decode --reps 20 && cat /tmp/step.txt
step test_cuda_ops 130 "$D/test_cuda_ops"
grep -E "attention|decode kernel|FAIL|\[  (PASSED|FAILED)|\[ +(FAILED) +\]" /tmp/step.txt | head -120
if session_wait "$Q3"; then
  for K in 1 2; do
    export GANTRY_ATTN_DECODE=$K
    step q3_q4km_k$K 50 "$D/bench_decode" --model "$Q3" --batch 1,8,32 --prompt 512 --gen 32 &&
      grep -E "^\|[ 0-9]|^\| attention|^batch|^sum of ops|warm-up" /tmp/step.txt
  done
  unset GANTRY_ATTN_DECODE
else
  echo "== qwen3-8b Q4_K_M not made: $(tail -2 /tmp/mk1.txt)"
fi
echo "== done in $(($(date +%s) - t0)) s"
