#!/bin/sh
# The whole GPU session in one call (run from the repository root on the GPU machine, with
# build-cuda-pack/dist.tar.xz made by pack.sh carried along): correctness tests, the decode
# benchmark on a generated qwen3-8b bf16 model, compute-sanitizer memcheck on the qwen35
# golden run, a per-kernel profile (ncu) of one eager decode step, and extra benchmarks while
# time remains (FULL=0 skips the profile and the
# graphs-off run; MEMCHECK=0 the sanitizer). Full logs go to $OUT; a summary is printed.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
[ -f build-cuda-pack/dist.tar.xz ] && tar xJf build-cuda-pack/dist.tar.xz
D=build-cuda-dist
export LD_LIBRARY_PATH="$PWD/$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GANTRY_GOLDEN="$PWD/tests/golden"

timeout 60 sh scripts/gpu/run_tests.sh >"$OUT/tests.txt" 2>&1
echo "tests rc=$?"
grep -E "FAIL|PASSED|FAILED|graphs:|^cuda .*case|rc=" "$OUT/tests.txt" | head -60

GEN=${GEN:-256} timeout 150 sh scripts/gpu/bench.sh >"$OUT/bench.txt" 2>&1
echo "bench rc=$?"
cat "$OUT/bench.txt"

[ "${MEMCHECK:-1}" = 1 ] && GANTRY_GOLDEN_ONLY=${MEMCHECK_ONLY:-qwen35} timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$D/test_cuda_golden" \
  >"$OUT/memcheck.txt" 2>&1
echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED|OK" "$OUT/memcheck.txt" | head

M=/tmp/qwen3-8b.bf16.gguf
if [ "${FULL:-1}" = 1 ] && [ -f $M ]; then
  GANTRY_CUDA_GRAPHS=0 timeout 110 ncu --clock-control none --launch-skip 700 --launch-count 500 --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    "$D/bench_decode" --model $M --batch 1 --prompt 16 --gen 4 >"$OUT/ncu.csv" 2>&1
  echo "ncu rc=$? ($(wc -l <"$OUT/ncu.csv") lines)"
  GANTRY_CUDA_GRAPHS=0 timeout 50 "$D/bench_decode" --model $M --batch 1,8 --prompt 512 --gen 64 2>&1 | tail -4
fi
PRESET=qwen3-8b TYPE=Q4_K_M BATCH=1,8,32 GEN=128 timeout 110 sh scripts/gpu/bench.sh 2>&1 | tail -9
