#!/bin/bash
# On the GPU machine, from the repository root, one device call for the tensor-core K-quant
# products (kernels/mmq.cu): the packed programs (scripts/gpu/pack.sh's dist.tar.xz, carried in
# $CARRY, default devcarry/k1, next to a copy of scripts/gpu/ in $CARRY/gpu) are unpacked to
# build-cuda-dist/, then $CARRY/gpu/suite.sh runs the GPU tests, bench_matvec (K-quant types) and
# bench_decode per MODELS (decode 1/8/32, prefill 512/2048, per-op profile, combined table);
# then prefill again with x in one bf16 part (GANTRY_PREFILL_XPARTS=1) and with the previous
# paths (GANTRY_MMQ=0) for comparison (PREFILL_ENVS: the list of settings). Logs under $OUT. Env:
# MODELS, GEN, TESTS, MICRO, *_TIMEOUT,
# PREFILL_ONLY_MODELS (models for the two extra prefill runs; default the first of MODELS).
set -u
C=${CARRY:-devcarry/k1}
OUT=${OUT:-/tmp/gpu-suite}
mkdir -p "$OUT"
t0=$(date +%s)
[ -x build-cuda-dist/bench_decode ] || tar xJf "$C/dist.tar.xz" || echo "== unpack FAILED"
cat build-cuda-dist/COMMIT 2>/dev/null
export MODELS=${MODELS:-qwen3-8b:Q4_K_M} GEN=${GEN:-64} BATCH=${BATCH:-1,8,32} PROMPT=${PROMPT:-512,2048}
GANTRY_SRC_ROOT=$PWD OUT=$OUT TESTS_TIMEOUT=${TESTS_TIMEOUT:-120} MICRO_TIMEOUT=${MICRO_TIMEOUT:-70} \
  BENCH_MATVEC_ARGS=${BENCH_MATVEC_ARGS:-"--types Q4_K,Q6_K,Q5_K,Q8_0 --reps 20"} BENCH_TIMEOUT=${BENCH_TIMEOUT:-100} \
  bash "$C/gpu/suite.sh"
echo "== suite rc=$? at $(($(date +%s) - t0)) s"
export LD_LIBRARY_PATH="$PWD/build-cuda-dist/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for spec in ${PREFILL_ONLY_MODELS:-${MODELS%% *}}; do
  m=/tmp/${spec%%:*}.${spec#*:}.gguf
  [ -s "$m" ] || continue
  for envs in ${PREFILL_ENVS:-GANTRY_PREFILL_XPARTS=1 GANTRY_MMQ=0}; do
    echo "== prefill $spec $envs"
    env $envs timeout "${PREFILL_TIMEOUT:-40}" build-cuda-dist/bench_decode --model "$m" --batch 1 --prompt "$PROMPT" \
      --gen 4 >"$OUT/prefill.$spec.$envs.txt" 2>&1
    echo "rc=$?"
    grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \|$|^\| 1 \|" "$OUT/prefill.$spec.$envs.txt"
  done
done
echo "== done at $(($(date +%s) - t0)) s"
