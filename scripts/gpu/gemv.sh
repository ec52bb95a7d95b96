#!/bin/sh
# One device call for the pipelined decode product (kernels/gemv_pipe*.cuh), run from the repository
# root on the GPU machine. Made here by `TARGETS=bench_gemv scripts/gpu/pack.sh`; on the device:
#   PACK=build-cuda-pack/dist.tar.xz sh scripts/gpu/gemv.sh      (carry build-cuda-pack)
# Steps (each under a timeout, skipped past BUDGET seconds; every output in $OUT/all.txt, the
# bench's table in $OUT/bench_gemv.txt; key lines on stdout):
#  1. compute-sanitizer memcheck on the check run (every variant x K split x rows 1..8 on small shapes
#     whose n_out is no multiple of a tile; bench_gemv --check 2), then racecheck / synccheck on two
#     variants (one with several chunks per stage, one with several groups per warp);
#  2. the sweep: bench_gemv (check + variants x shapes x rows 1,2,4,8 vs matvec / mmq3 / mmq1), Q4_K
#     and Q6_K; then Q5_K at rows 1 and 8 ($OUT/bench_gemv_q5k.txt).
# For ncu on one variant afterwards (stall reasons):
#   ncu --clock-control none --set full -k regex:gp_kernel -c 1 build-cuda-dist/bench_gemv \
#       --only r64w8s4b2/k1 --shape "q3 swiglu" --rows 1 --reps 3 --check 0 --base 0
set -u
OUT=${OUT:-/tmp/gemv-out}
PACK=${PACK:-build-cuda-pack/dist.tar.xz}
BUDGET=${BUDGET:-540}
. "$(dirname "$0")/session_lib.sh"
[ -x build-cuda-dist/bench_gemv ] || rm -rf build-cuda-dist
session_begin "$PACK"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step memcheck 200 "$CS" --tool memcheck --error-exitcode 3 "$D/bench_gemv" --check 2 --types Q4_K,Q5_K,Q6_K
grep -E "ERROR SUMMARY|FAIL|^check:|refused|all checks|VALIDATION" /tmp/step.txt | head -40
for V in r32w8s3b2 r128w4s3b2; do
  for T in racecheck synccheck; do
    step "${T}_$V" 60 "$CS" --tool "$T" --error-exitcode 3 "$D/bench_gemv" --check 2 --only "$V/k2"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAIL|^check:" /tmp/step.txt | head -10
  done
done
step bench_gemv 240 "$D/bench_gemv" --reps 20
cp /tmp/step.txt "$OUT/bench_gemv.txt"
grep -E "^copy|^device|^check:|FAIL|note:|all checks|VALIDATION" /tmp/step.txt | head -40
sed -n '/^summary/,$p' /tmp/step.txt
step bench_gemv_q5k 60 "$D/bench_gemv" --reps 20 --types Q5_K --rows 1,8 --check 0
cp /tmp/step.txt "$OUT/bench_gemv_q5k.txt"
sed -n '/^summary/,/^per variant/p' /tmp/step.txt
echo "== done in $(($(date +%s) - t0)) s"
