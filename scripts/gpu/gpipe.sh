#!/bin/sh
# One device call for the wired pipelined decode product (kernels/gemv_pipe.cu, GANTRY_GPIPE), run
# from the repository root on the GPU machine. Made here by
#   TARGETS="test_cuda_ops bench_gemv bench_decode gantry-mkmodel" scripts/gpu/pack.sh
# on the device:  sh scripts/gpu/gpipe.sh   (carry build-cuda-pack)
# Steps (each under a timeout, skipped past BUDGET seconds; every output in $OUT/all.txt):
#  1. gantry-mkmodel qwen3-8b and qwen35-9b Q4_K_M in the background (as scripts/gpu/pdl.sh);
#  2. test_cuda_ops test_gpipe (forced: Q4_K / Q5_K / Q6_K, rows 1..8, matmul / multi / swiglu vs
#     the CPU) and test_activations_bf16 / test_matvec_mma / test_mmq under the auto mode;
#  3. bench_gemv --wired 1: per shape, type and rows, us and % of copy bandwidth of the current
#     path, gemv_pipe auto and gemv_pipe forced (x in 1 part at 3..8 rows: bf16 activations; then
#     --parts 3 at rows 4, 8: fp32);
#  4. bench_decode per model at --batch $BATCH --prompt 512 for GANTRY_GPIPE in $MODES (0 never,
#     auto = unset, 1 always): ms/step and the per-op profile (products labelled "gpipe" / "mmq").
set -u
OUT=${OUT:-/tmp/gpipe}
PACK=${PACK:-build-cuda-pack/dist.tar.xz}
BUDGET=${BUDGET:-560} BATCH=${BATCH:-1,2,8} GEN=${GEN:-64}
. "$(dirname "$0")/session_lib.sh"
session_begin "$PACK"
MD=${MODELDIR:-/tmp}
[ -s "$MD/q8b.gguf" ] || session_mkmodel "$MD/q8b.gguf" "$OUT/mk.q8b.txt" --preset qwen3-8b --type Q4_K_M --threads 6
[ -s "$MD/q9b.gguf" ] || session_mkmodel "$MD/q9b.gguf" "$OUT/mk.q9b.txt" --preset qwen35-9b --type Q4_K_M --threads 6 --keep-output-bf16
step test_gpipe 150 env GANTRY_TEST_ONLY=test_gpipe "$D/test_cuda_ops"
grep -E "FAIL|PASSED|FAILED|SKIPPED" /tmp/step.txt | head -20
for t in test_activations_bf16 test_matvec_mma test_mmq test_matmul_multi test_ffn_swiglu test_decode_graphs; do
  step "$t" 90 env GANTRY_TEST_ONLY=$t "$D/test_cuda_ops" # the auto mode (GANTRY_GPIPE unset)
  grep -E "FAIL|PASSED|FAILED" /tmp/step.txt | head -8
done
step wired 150 "$D/bench_gemv" --wired 1 --types Q4_K,Q6_K --rows 1,2,4,8 --reps 20
cp /tmp/step.txt "$OUT/wired.txt"
sed -n '/^wired/,$p' /tmp/step.txt
step wired_fp32 60 "$D/bench_gemv" --wired 1 --types Q4_K,Q6_K --rows 4,8 --parts 3 --reps 20
sed -n '/^wired/,$p' /tmp/step.txt
step wired_q5k 40 "$D/bench_gemv" --wired 1 --types Q5_K --rows 1,8 --reps 20
sed -n '/^wired/,$p' /tmp/step.txt
for m in q8b q9b; do
  session_wait "$MD/$m.gguf" || { echo "== $m not made"; tail -3 "$OUT/mk.$m.txt"; continue; }
  for g in ${MODES:-0 auto 1}; do
    if [ "$g" = auto ]; then set -- env -u GANTRY_GPIPE; else set -- env GANTRY_GPIPE=$g; fi
    step "bench $m gpipe=$g" 120 "$@" "$D/bench_decode" --model "$MD/$m.gguf" --batch "$BATCH" --prompt 512 --gen "$GEN"
    cp /tmp/step.txt "$OUT/bench.$m.$g.txt"
    grep -E '^\| [0-9]+ \|' /tmp/step.txt | sed "s/^/$m gpipe=$g /" | head -8
    grep -E 'gpipe|sum of ops' /tmp/step.txt | head -12
  done
done
echo "== done in $(($(date +%s) - t0)) s"
